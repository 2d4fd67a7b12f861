"""summary.json's figures as every view shows them (`compare`, report.html, the dashboard's Runs
page): their labels and order, egress in the unit that suits the link, and the per-node table.

Reads a summary with `.get` and checks each value's type, so a summary recorded before a figure
existed shows "no data" for it instead of failing. Computes nothing new: `records.summarize` does.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from emulator.telemetry.timeseries import BIT_PER_GBIT, rate_unit

# (summary key, label) of the numbers shown beside one another, in this order; egress is apart
# (its unit depends on its size: `egress_bit_per_s`, `rate_label`).
HEADLINE: tuple[tuple[str, str], ...] = (
    ("ttft_mean_s", "TTFT mean (s)"),
    ("ttft_p50_s", "TTFT P50 (s)"),
    ("ttft_p90_s", "TTFT P90 (s)"),
    ("ttft_noqueue_mean_s", "TTFT no-queue mean (s)"),
    ("ttft_noqueue_p50_s", "TTFT no-queue P50 (s)"),
    ("ttft_noqueue_p90_s", "TTFT no-queue P90 (s)"),
    ("throughput_rps", "throughput (req/s)"),
    ("tpot_mean_s", "TPOT mean (s)"),
    ("completed_fraction", "completed fraction"),
    ("prfaas_fraction", "offloaded (of requests)"),
    ("prfaas_input_token_fraction", "offloaded (of input tokens)"),
    ("prefix_hit_fraction", "prefix hit (cached/input)"),
    ("prefix_hit_fraction_remote", "prefix hit, remote"),
    ("prefix_hit_fraction_local", "prefix hit, local"),
)
EGRESS_KEY = "egress_bit_per_s_mean"
NOQUEUE_NOTE = ("TTFT no-queue is the paper's Table 6 TTFT: prefill service time plus the KV transfer "
                "left exposed after it, without waiting in any queue; TTFT counts the queues too.")
NODE_NOTE = ("Per node: requests served; for a prefill node also its busy fraction (prefill time over "
             "the run) and mean queue (requests waiting on average, by Little's law).")


def number(summary: Mapping[str, Any], key: str) -> float | None:
    """A numeric figure, or None when the summary lacks it (or holds no number there)."""
    value = summary.get(key)
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return float(value)


def egress_bit_per_s(summary: Mapping[str, Any]) -> float | None:
    """Mean egress in bit/s; from `egress_gbps_mean` in summaries recorded before bit/s."""
    value = number(summary, EGRESS_KEY)
    if value is None:
        gbps = number(summary, "egress_gbps_mean")
        value = None if gbps is None else gbps * BIT_PER_GBIT
    return value


def rate_label(values_bit_per_s: Iterable[float | None]) -> tuple[str, float]:
    """(unit label, bit/s per unit) that suits the largest of `values_bit_per_s`: Mbit/s for a
    Mbit/s link, Gbit/s from 1 Gbit/s up (timeseries.rate_unit, as the egress charts)."""
    known = [v for v in values_bit_per_s if v is not None]
    return rate_unit(max(known) if known else math.nan)


def format_rate(bit_per_s: float | None) -> str:
    """`8.7 Mbit/s`, `42.1 Gbit/s`; `-` when there is no data."""
    if bit_per_s is None:
        return "-"
    unit, per_unit = rate_label([bit_per_s])
    return f"{bit_per_s / per_unit:.3g} {unit}"


@dataclass(frozen=True, slots=True)
class NodeFigures:
    """One node's row of the per-node table; None where the summary has no such figure."""

    node: str
    role: str  # "prefill" or "decode": which table of the summary it came from
    requests: int | None
    busy_fraction: float | None = None
    queue_mean: float | None = None


def node_figures(summary: Mapping[str, Any]) -> tuple[NodeFigures, ...]:
    """The prefill nodes then the decode nodes, as the summary lists them; () for a summary
    recorded before per-node figures."""
    rows = []
    for role, key in (("prefill", "prefill_nodes"), ("decode", "decode_nodes")):
        table = summary.get(key)
        if not isinstance(table, Mapping):
            continue
        for node, figures in table.items():
            if not isinstance(figures, Mapping):
                continue
            served = number(figures, "requests")
            rows.append(NodeFigures(str(node), role, None if served is None else int(served),
                                    number(figures, "busy_fraction"), number(figures, "queue_mean")))
    return tuple(rows)


def format_node(row: NodeFigures | None) -> str:
    """`412 req, busy 83.0%, queue 1.2` (a decode node: `412 req`); `-` for a node the run lacks."""
    if row is None:
        return "-"
    parts = [f"{row.requests:,} req" if row.requests is not None else "- req"]
    if row.role == "prefill":
        parts.append("busy -" if row.busy_fraction is None else f"busy {row.busy_fraction:.1%}")
        parts.append("queue -" if row.queue_mean is None else f"queue {_short(row.queue_mean)}")
    return ", ".join(parts)


def _short(value: float) -> str:
    """Three significant digits, and a hotspot's long queue in full (`2,343`, not `2.34e+03`)."""
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.3g}"
