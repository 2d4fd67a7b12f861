"""What a Classroom step says you will see, as checks on the run it started: each check reads the
run's own record (summary.json, requests.parquet, timeseries.parquet) and answers with a Verdict in
the step's words. The tour's browser test and bench/classroom_steps.py run them, so a promise that
a run no longer keeps fails a test, not a class. Shares expected from a scenario are derived from it
(its length law and threshold), never typed in.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from app.recorded_meta import RecordedMeta
from emulator.plane.inputs import workload_lengths
from emulator.scenario import Scenario
from emulator.telemetry.run_files import RunFolder

# A run of 8 or more requests of a shipped Classroom scenario sends a share remote within this of
# the share its length law gives (the scenarios' seeds are chosen for it; see their headers).
SHARE_MARGIN = 0.15
SHORT_QUEUE = 3  # waiting requests per prefill pool: "no queue" on a demo not about queues
BUILT_QUEUE = 3  # and the least a step about a queue shows
BUSY_LINK = 0.8  # "egress sits at the link": its median over the arrivals, of the capacity
QUIET_LINK = 0.7  # "under the link": the mean egress, of the capacity


@dataclass(frozen=True, slots=True)
class Verdict:
    promise: str  # in the step's words
    seen: str  # what the run's record shows
    held: bool


@dataclass(frozen=True, slots=True)
class RunRecord:
    """A finished run's record, with the scenario it ran (overrides applied)."""

    scenario: Scenario
    doc: dict[str, Any]
    requests: pd.DataFrame
    timeseries: pd.DataFrame
    run_meta: RecordedMeta  # the doc's `meta`, read once: what the promises read

    @classmethod
    def read(cls, run_dir: Path, scenario: Scenario) -> RunRecord:
        folder = RunFolder(Path(run_dir))
        doc = folder.read_json("summary.json")
        return cls(scenario, doc, folder.read_parquet("requests.parquet").to_pandas(),
                   folder.read_parquet("timeseries.parquet").to_pandas(), RecordedMeta.from_doc(doc))

    @property
    def summary(self) -> dict[str, Any]:
        return self.doc.get("summary", {})

    @property
    def meta(self) -> dict[str, Any]:
        """The doc's `meta` as written, for bench/classroom_steps.py, which copies its workload's
        arrival rate into its results; the promises read `run_meta`."""
        return self.doc.get("meta", {})


Promise = Callable[[RunRecord], list[Verdict]]


def expected_share(scenario: Scenario, threshold: float) -> float:
    """P(input length > threshold) under the scenario's length law: the share routed remote."""
    lengths, _ = workload_lengths(scenario)
    return float(lengths.tail_prob(threshold))


def _pct(x: float) -> str:
    return f"{x:.0%}"


def share_near(record: RunRecord, threshold: float, words: str, start_s: float = 0.0,
               end_s: float = math.inf) -> Verdict:
    """The share of requests arriving in [start_s, end_s) sent remote, within SHARE_MARGIN of the
    scenario's own P(L > threshold)."""
    window = record.requests[(record.requests["arrival_s"] >= start_s) & (record.requests["arrival_s"] < end_s)]
    want = expected_share(record.scenario, threshold)
    if window.empty:
        return Verdict(words, "no request arrived in that window", False)
    share = float((window["route"] == "prfaas").mean())
    seen = f"{_pct(share)} of {len(window)} requests remote (expected {_pct(want)} +- {_pct(SHARE_MARGIN)})"
    return Verdict(words, seen, abs(share - want) <= SHARE_MARGIN)


def all_complete(record: RunRecord) -> Verdict:
    s = record.summary
    done, total = s.get("completed") or 0, s.get("requests") or 0
    return Verdict("every request completes", f"{done} of {total} completed, {s.get('failed_count') or 0} failed",
                   total > 0 and done == total)


def _egress(record: RunRecord) -> pd.DataFrame:
    ts = record.timeseries.dropna(subset=["egress_bit_per_s", "link_capacity_bit_per_s"])
    return ts[ts["link_capacity_bit_per_s"] > 0]


def egress_below(record: RunRecord, fraction: float, words: str) -> Verdict:
    ts = _egress(record)
    peak = float((ts["egress_bit_per_s"] / ts["link_capacity_bit_per_s"]).max()) if len(ts) else 0.0
    return Verdict(words, f"egress peaked at {_pct(peak)} of the link", peak <= fraction)


def egress_mean_below(record: RunRecord, fraction: float, words: str) -> Verdict:
    ts = _egress(record)
    mean = float((ts["egress_bit_per_s"] / ts["link_capacity_bit_per_s"]).mean()) if len(ts) else 0.0
    return Verdict(words, f"egress averaged {_pct(mean)} of the link", mean <= fraction)


def link_busy(record: RunRecord, words: str) -> Verdict:
    """The median egress, from the first remote arrival to the last arrival, near the capacity."""
    remote = record.requests[record.requests["route"] == "prfaas"]
    if remote.empty:
        return Verdict(words, "no request went remote", False)
    ts = _egress(record)
    ts = ts[(ts["t_s"] >= remote["arrival_s"].min()) & (ts["t_s"] <= record.requests["arrival_s"].max())]
    busy = float((ts["egress_bit_per_s"] / ts["link_capacity_bit_per_s"]).median()) if len(ts) else 0.0
    return Verdict(words, f"median egress {_pct(busy)} of the link while requests arrived", busy >= BUSY_LINK)


def queue_peak(record: RunRecord) -> int:
    cols = [c for c in ("queue_remote_prefill", "queue_local_prefill") if c in record.timeseries]
    return int(record.timeseries[cols].max().max()) if cols and len(record.timeseries) else 0


def queues_short(record: RunRecord) -> Verdict:
    peak = queue_peak(record)
    return Verdict(f"no prefill queue builds (at most {SHORT_QUEUE} waiting)", f"at most {peak} waiting",
                   peak <= SHORT_QUEUE)


def queues_build_then_drain(record: RunRecord) -> Verdict:
    peak, ts = queue_peak(record), record.timeseries
    last = int(ts[["queue_remote_prefill", "queue_local_prefill"]].iloc[-1].max()) if len(ts) else 0
    return Verdict(f"prefill queues build (at least {BUILT_QUEUE} waiting), then drain",
                   f"at most {peak} waiting, {last} at the end", peak >= BUILT_QUEUE and last == 0)


def remote_ttft_queues(record: RunRecord) -> Verdict:
    """The median remote TTFT at least twice the median time of one remote transfer alone on the
    link (its KV bytes at the starting capacity): transfers wait for, or share, the link."""
    remote = record.requests[(record.requests["route"] == "prfaas") & record.requests["ttft_s"].notna()]
    capacity = record.scenario.link.to_local.rate_bytes_per_s
    words = "remote TTFT grows to many times one transfer's time"
    if remote.empty or not math.isfinite(capacity):
        return Verdict(words, f"{len(remote)} remote requests on a link of {capacity} B/s", False)
    alone, ttft = float((remote["kv_bytes"] / capacity).median()), float(remote["ttft_s"].median())
    return Verdict(words, f"median remote TTFT {ttft:.1f} s, one transfer alone {alone:.1f} s", ttft >= 2 * alone)


def remote_ttft_near_transfer(record: RunRecord) -> Verdict:
    """The contrary of remote_ttft_queues: the median remote TTFT under twice one transfer alone."""
    queued = remote_ttft_queues(record)
    return Verdict("remote TTFT stays near one transfer's time", queued.seen,
                   not queued.held and "remote requests on a link" not in queued.seen)


def threshold_raised(record: RunRecord, after_s: float) -> Verdict:
    ts = record.timeseries.dropna(subset=["threshold_tokens"])
    start = int(ts["threshold_tokens"].iloc[0]) if len(ts) else 0
    later = ts[ts["t_s"] > after_s]["threshold_tokens"]
    top = int(later.max()) if len(later) else start
    return Verdict(f"the scheduler raises t after the drop at {after_s:g} s", f"t {start:,} -> {top:,}", top > start)


def optimum(record: RunRecord, t: int, split: str) -> Verdict:
    n_p, seen_t = record.run_meta.n_p_start, record.run_meta.threshold_start
    local = record.scenario.clusters.local.instances
    seen = f"t = {seen_t:,}, split {n_p}:{local - n_p}" if seen_t is not None and n_p is not None else "-"
    return Verdict(f"t* = {t:,} with a {split} prefill/decode split", seen, seen == f"t = {t:,}, split {split}")


def _timeline_threshold(scenario: Scenario) -> tuple[float, float]:
    """(the time of the timeline's threshold change, the threshold it sets)."""
    event = next(e for e in scenario.timeline if e.set and "router.threshold_tokens" in e.set)
    return event.at_s, float(event.set["router.threshold_tokens"])


def first_run(r: RunRecord) -> list[Verdict]:
    t = float(r.scenario.router.threshold_tokens)
    return [share_near(r, t, "about half the requests go remote"), all_complete(r),
            egress_below(r, 0.5, "egress stays far below the link"), queues_short(r)]


def dense(r: RunRecord) -> list[Verdict]:
    return [link_busy(r, "egress sits at the link's capacity"), remote_ttft_queues(r), all_complete(r)]


def hybrid(r: RunRecord) -> list[Verdict]:
    return [egress_mean_below(r, QUIET_LINK, "egress stays under the link"), remote_ttft_near_transfer(r),
            all_complete(r)]


def link_then_threshold(r: RunRecord) -> list[Verdict]:
    at_s, raised = _timeline_threshold(r.scenario)
    start = float(r.scenario.router.threshold_tokens)
    return [share_near(r, start, "about three in four go remote before the threshold rises", end_s=at_s),
            share_near(r, raised, "about one in two after it", start_s=at_s), all_complete(r)]


def bandwidth_drop(r: RunRecord) -> list[Verdict]:
    drop_s = next(e.at_s for e in r.scenario.timeline if e.link is not None)
    return [threshold_raised(r, drop_s), all_complete(r)]


def burst(r: RunRecord) -> list[Verdict]:
    return [queues_build_then_drain(r), all_complete(r)]


def paper(r: RunRecord) -> list[Verdict]:
    t = r.run_meta.threshold_start or 0
    return [share_near(r, float(t), "about half the requests go remote"), optimum(r, 19_620, "3:5")]

