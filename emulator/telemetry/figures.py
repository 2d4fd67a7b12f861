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

from emulator.telemetry.labels import format_number, label
from emulator.telemetry.timeseries import BIT_PER_GBIT, rate_unit

# The numbers shown beside one another, in this order, named as labels.py names them; egress is
# apart (its unit depends on its size: `egress_bit_per_s`, `rate_label`, `egress_label`).
HEADLINE_KEYS = ("ttft_mean_s", "ttft_p50_s", "ttft_p90_s", "ttft_noqueue_mean_s", "ttft_noqueue_p50_s",
                 "ttft_noqueue_p90_s", "throughput_rps", "tpot_mean_s", "completed_fraction", "prfaas_fraction",
                 "prfaas_input_token_fraction", "prefix_hit_fraction", "prefix_hit_fraction_remote",
                 "prefix_hit_fraction_local")
HEADLINE: tuple[tuple[str, str], ...] = tuple((key, label(key)) for key in HEADLINE_KEYS)
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


def egress_label(unit: str) -> str:
    """The mean egress's name in a table whose values are in `unit` (`rate_label`)."""
    return f"{label(EGRESS_KEY)} ({unit})"


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
        parts.append("queue -" if row.queue_mean is None else f"queue {format_number(row.queue_mean)}")
    return ", ".join(parts)

