"""The one name of each summary.json figure and meta key, with its unit, and the one way a figure's
number is written (three significant digits, `-` for no data): `compare`, the CLI's final table,
report.html and the Runs page all read them here, so a figure has the same name everywhere.

Names and number text only; which figures a view shows, and egress's unit, are `figures.py`'s.
"""

from __future__ import annotations

import math
from typing import Any

# summary.json's `summary` keys (records.summarize). Egress is named without its unit: the unit
# depends on the link (figures.egress_label).
FIGURE_LABELS: dict[str, str] = {
    "duration_s": "duration (s)",
    "requests": "requests",
    "completed": "completed",
    "failed_count": "failed",
    "completed_fraction": "completed fraction",
    "ttft_mean_s": "TTFT mean (s)",
    "ttft_p50_s": "TTFT P50 (s)",
    "ttft_p90_s": "TTFT P90 (s)",
    "ttft_p99_s": "TTFT P99 (s)",
    "ttft_noqueue_mean_s": "TTFT no-queue mean (s)",
    "ttft_noqueue_p50_s": "TTFT no-queue P50 (s)",
    "ttft_noqueue_p90_s": "TTFT no-queue P90 (s)",
    "tpot_mean_s": "TPOT mean (s)",
    "throughput_rps": "throughput (req/s)",
    "prfaas_fraction": "offloaded (of requests)",
    "prfaas_input_token_fraction": "offloaded (of input tokens)",
    "prefix_hit_fraction": "prefix hit (cached/input)",
    "prefix_hit_fraction_remote": "prefix hit, remote",
    "prefix_hit_fraction_local": "prefix hit, local",
    "kv_bytes_total": "KV sent (bytes)",
    "egress_bit_per_s_mean": "egress mean",
    "egress_gbps_mean": "egress mean (Gbit/s)",
    "failed_by_reason": "failed, by reason",
    "prefill_nodes": "prefill nodes",
    "decode_nodes": "decode nodes",
}
# summary.json's `meta` keys (run_meta.RunMeta).
META_LABELS: dict[str, str] = {
    "engine": "engine",
    "scenario": "scenario",
    "seed": "seed",
    "run_id": "run id",
    "model": "model",
    "profile": "cost profile",
    "policy": "routing policy",
    "prefix_rule": "prefix rule",
    "affinity": "prefill node choice",
    "scheduler": "scheduler loops",
    "threshold_start": "threshold at start (tokens)",
    "n_p_start": "local prefill nodes at start",
    "lambda_max_model": "model's max rate (req/s)",
    "link": "link",
    "link_backend": "link backend",
    "link_backend_reason": "link backend, why",
    "transport": "transport",
    "decisions": "scheduler decisions",
    "knob_changes": "knob changes",
    "notes": "notes",
    "end_reason": "how it ended",
    "workload": "workload",
    "engine_details": "engine details",
}


def label(key: str) -> str:
    """A figure's or meta key's human name; an unknown key (a newer summary) with spaces for `_`."""
    return FIGURE_LABELS.get(key) or META_LABELS.get(key) or key.replace("_", " ")


def format_number(value: Any, digits: int = 3, keep_zeros: bool = False) -> str:
    """`0.123`, `1.5`, `250`, `12,345`: `digits` significant digits, whole numbers from
    10**(digits-1) up (a hotspot's long queue in full, never `2.34e+03`), `-` when there is no
    number; text passes through. `keep_zeros` writes the digits a figure was given to (`3.60`,
    `13.0`: a published figure's precision)."""
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "-"
    if isinstance(value, bool) or not isinstance(value, int | float):
        return str(value)
    if isinstance(value, int) or abs(value) >= 10 ** (digits - 1):
        return f"{round(value):,}"
    return f"{value:#.{digits}g}".rstrip(".") if keep_zeros else f"{value:.{digits}g}"
