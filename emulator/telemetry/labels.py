"""The one name of each summary.json figure and meta key (and of a sweep's columns), with its unit,
and the one way a figure's number is written (three significant digits, `-` for no data): `compare`,
the CLI's final table, report.html and the Runs and Sweeps pages all read them here, so a figure has
the same name everywhere.

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
    "outcome": "outcome",
    "stopped_by": "stopped by",
    "stopped_at_s": "stopped at (s)",
    "workload": "workload",
    "engine_details": "engine details",
}

# sweep.parquet's own columns and the metrics only a sweep keeps: the analytic optimum
# (emulator.sweep.spec.ANALYTIC_METRICS), the measured stage throughputs and a capacity search's.
SWEEP_LABELS: dict[str, str] = {
    "point_id": "point",
    "wall_s": "wall (s)",
    "lambda_max": "Λ_max at the optimum (req/s)",
    "t": "threshold t at the optimum (tokens)",
    "p": "offloaded p at the optimum",
    "n_prfaas": "PrfaaS prefill nodes",
    "n_p": "local prefill nodes N_p",
    "n_d": "decode nodes N_d",
    "egress_gbps": "egress at the optimum (Gbit/s)",
    "gain_vs_homogeneous": "gain over homogeneous PD",
    "gain_vs_naive": "gain over naive (all prefill remote)",
    "homogeneous_lambda_max": "homogeneous PD Λ_max (req/s)",
    "naive_lambda_max": "naive Λ_max, all prefill remote (req/s)",
    "configured_lambda_max": "Λ_max as configured (req/s)",
    "configured_lambda_max_mean_t": "Λ_max as configured, own T (req/s)",
    "configured_t": "threshold t as configured (tokens)",
    "configured_n_p": "N_p as configured",
    "configured_egress_gbps": "egress as configured (Gbit/s)",
    "configured_p": "p as configured",
    "configured_theta_prfaas": "Θ_prfaas as configured (req/s)",
    "configured_theta_pd_p": "Θ_pd-p as configured (req/s)",
    "configured_theta_pd_d": "Θ_pd-d as configured (req/s)",
    "measured_p": "p measured",
    "measured_theta_prfaas": "Θ_prfaas measured (req/s)",
    "measured_theta_pd_p": "Θ_pd-p measured (req/s)",
    "measured_theta_pd_d": "Θ_pd-d measured (req/s)",
    "measured_lambda_max": "Λ_max measured (req/s)",
    "capacity_rps": "capacity (req/s)",
    "capacity_ratio": "capacity / model's max rate",
    "capacity_probes": "capacity probes",
    "capacity_converged": "capacity converged (1 = yes)",
}


# The Live page's knobs by name (app.knob_sync): their widgets and the "not applied" line beside them.
KNOB_LABELS: dict[str, str] = {
    "threshold": "Threshold (tokens)",
    "policy": "Router policy",
    "affinity": "Cache affinity",
    "short_term": "Scheduler, short-term (re-search t)",
    "long_term": "Scheduler, long-term (re-split P/D)",
    "rate_per_s": "Arrival rate (req/s)",
    "bandwidth_mbit": "Bandwidth (Mbit/s; empty = unshaped)",
    "delay_ms": "Delay (ms)",
    "jitter_ms": "Jitter (ms)",
    "loss_pct": "Loss (%)",
}


def label(key: str) -> str:
    """A figure's, meta key's or sweep column's human name; an unknown key (a newer summary) with
    spaces for `_`."""
    return FIGURE_LABELS.get(key) or META_LABELS.get(key) or SWEEP_LABELS.get(key) or key.replace("_", " ")


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


# A scenario setting by its path (sweep axes, `--set`, the timeline's `set:`), named as a person reads it.
SETTING_LABELS: dict[str, str] = {
    "router.threshold_tokens": "threshold t (tokens)",
    "router.policy": "routing policy",
    "router.affinity": "prefill node choice",
    "router.prefix_rule": "prefix rule",
    "clusters.local.prefill_instances": "local prefill instances N_p",
    "clusters.local.instances": "local instances",
    "clusters.remote.instances": "PrfaaS prefill instances",
    "link.bandwidth_mbit": "link bandwidth (Mbit/s)",
    "link.delay_ms": "link delay (ms)",
    "link.jitter_ms": "link jitter (ms)",
    "link.loss_pct": "link loss (%)",
    "workload.arrival.rate_per_s": "arrival rate (req/s)",
    "scheduler.short_term.enabled": "short-term scheduler on",
    "scheduler.long_term.enabled": "long-term scheduler on",
    "model.preset": "model preset",
    "model.size": "model size",
    "duration_s": "duration (s)",
}
# A setting's unit, from the suffix its name carries (design.md: scenario fields carry their unit).
_UNIT_SUFFIXES = (("_mbit", "Mbit/s"), ("_per_s", "/s"), ("_tokens", "tokens"), ("_ms", "ms"),
                  ("_pct", "%"), ("_mib", "MiB"), ("_s", "s"))
_SECTIONS = ("clusters", "workload", "scheduler", "model", "router", "transport", "prefix_cache")

# The throughput model's bottleneck (control.throughput_model.Bottleneck values): the term of Eq. 6
# that sets Λ_max.
BOTTLENECK_LABELS: dict[str, str] = {
    "prfaas-compute": "PrfaaS compute",
    "egress": "link egress",
    "pd-prefill": "local prefill",
    "pd-decode": "decode",
}
# Where a request went (control.types.Route values).
ROUTE_LABELS: dict[str, str] = {"prfaas": "remote", "local": "local"}


def setting_label(path: str) -> str:
    """A setting's human name: `clusters.local.prefill_instances` -> `local prefill instances N_p`;
    one not listed is worded from its path and unit suffix (`link.queue_ms` -> `link queue (ms)`)."""
    if path in SETTING_LABELS:
        return SETTING_LABELS[path]
    parts = path.split(".")
    if len(parts) > 1 and parts[0] in _SECTIONS:
        parts = parts[1:]
    last, unit = parts[-1], ""
    for suffix, name in _UNIT_SUFFIXES:
        if last.endswith(suffix) and last != suffix.lstrip("_"):
            last, unit = last.removesuffix(suffix), f" ({name})"
            break
    return " ".join([*parts[:-1], last]).replace("_", " ") + unit
