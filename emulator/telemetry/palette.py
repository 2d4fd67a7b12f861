"""The colours of a route and of a pool, one each on every chart: report.html, the dashboard's Runs,
Live, Threshold explorer and Sweeps pages all read them here (app/palette.py re-exports them), so
red means the PrfaaS path wherever it is drawn. Model colours are the dashboard's own (app/palette.py).
Runs set side by side (`compare`, the Runs page's Compare tab) take RUN_COLORS in their order.
"""

from __future__ import annotations

from emulator.control.types import Route

# Requests by route (`Route`'s values, as requests.parquet and the bus spell them).
ROUTE_COLORS: dict[str, str] = {Route.PRFAAS.value: "#d62728", Route.LOCAL.value: "#1f77b4"}
NO_ROUTE_COLOR = "#7f7f7f"  # a request that failed before it was routed (`none` in the CDF)
# Instance pools: the PrfaaS prefill cluster (the PrfaaS route's), the local prefill pool PD-P (the
# local route's) and the decode pool PD-D, which both routes share.
POOL_COLORS: dict[str, str] = {"prfaas": ROUTE_COLORS[Route.PRFAAS.value],
                               "pd_p": ROUTE_COLORS[Route.LOCAL.value], "pd_d": "#2ca02c"}
# Queue depths by the pool they wait for, as the Live frame and timeseries.parquet (`queue_` prefixed) name them.
QUEUE_COLORS: dict[str, str] = {"remote_prefill": POOL_COLORS["prfaas"], "local_prefill": POOL_COLORS["pd_p"],
                                "decode": POOL_COLORS["pd_d"]}


# Runs compared, in order (A, B, ...): far apart in hue and lightness, and neither route's red nor
# blue, so a run's line is never read as a route (ColorBrewer Dark2).
RUN_COLORS: tuple[str, ...] = ("#1b9e77", "#d95f02", "#7570b3", "#e7298a", "#66a61e", "#e6ab02", "#a6761d",
                               "#666666")


def run_color(index: int) -> str:
    """The colour of the `index`-th run compared (0 is A)."""
    return RUN_COLORS[index % len(RUN_COLORS)]


def route_color(route: object) -> str:
    """The colour of a route's value (`prfaas`, `local`); grey for none or an unknown one."""
    return ROUTE_COLORS.get(str(route), NO_ROUTE_COLOR)


def queue_color(column: str) -> str:
    """The colour of a queue-depth column, with or without timeseries.parquet's `queue_` prefix."""
    return QUEUE_COLORS.get(column.removeprefix("queue_"), NO_ROUTE_COLOR)
