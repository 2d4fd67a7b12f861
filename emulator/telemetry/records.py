"""The per-request record of design.md, the run summary computed from records, and `expect:` checks.

Plain values and arithmetic only; writing them to parquet/JSON is `recorder.py`'s job. Summary
percentiles use `metrics.percentile` (linear interpolation, as numpy) over completed requests.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, fields

from emulator.control.types import FailReason, RequestStatus, Route
from emulator.errors import TelemetryError
from emulator.telemetry.metrics import percentile

# The enums' values, as records hold them (plain strings: parquet columns, and a set lookup per
# record where the virtual engine builds one per simulated request)
STATUSES: frozenset[str] = frozenset(s.value for s in RequestStatus)
ROUTES: frozenset[str] = frozenset(r.value for r in Route)
FAIL_REASONS: frozenset[str] = frozenset(r.value for r in FailReason)
_COMPLETED, _FAILED = RequestStatus.COMPLETED.value, RequestStatus.FAILED.value
_PRFAAS, _LOCAL = Route.PRFAAS.value, Route.LOCAL.value
BOUNDS = ("min", "max")


@dataclass(slots=True, kw_only=True)
class RequestRecord:
    """One request from arrival to its end; fields (and their order) are design.md's contract.

    A failed request keeps what it reached (e.g. no `first_token_s`) and names `fail_reason`, a
    FailReason value (the same tag on every engine), with the engine's own words in `fail_detail`.
    `status`, `route` and `fail_reason` hold their enum's value, checked here.
    Read-only by convention, not frozen: a frozen dataclass's __init__ costs three times as much,
    and the virtual engine builds one per simulated request.
    """

    id: str
    arrival_s: float
    input_len: int
    cached_len: int
    incremental_len: int
    route: str | None = None  # a Route value; None if it failed before routing
    prefill_node: str | None = None
    decode_node: str | None = None
    queue_s: float | None = None
    prefill_start_s: float | None = None
    prefill_end_s: float | None = None
    transfer_start_s: float | None = None
    transfer_end_s: float | None = None
    kv_bytes: int | None = None
    first_token_s: float | None = None
    ttft_s: float | None = None
    tpot_s: float | None = None
    output_len: int
    finish_s: float | None = None
    status: str  # a RequestStatus value
    fail_reason: str | None = None  # a FailReason value; set exactly when the request failed
    fail_detail: str | None = None  # the engine's words: which node, what error

    # Written out, so mypyc compiles it (dataclass keeps a class's own __init__): the generated one
    # runs interpreted, behind a dict of 22 keywords, and cost a tenth of a case-study run (issue 28,
    # callgrind). A test holds it to the fields above, their order and defaults.
    def __init__(self, *, id: str, arrival_s: float, input_len: int, cached_len: int, incremental_len: int,
                 route: str | None = None, prefill_node: str | None = None, decode_node: str | None = None,
                 queue_s: float | None = None, prefill_start_s: float | None = None,
                 prefill_end_s: float | None = None, transfer_start_s: float | None = None,
                 transfer_end_s: float | None = None, kv_bytes: int | None = None,
                 first_token_s: float | None = None, ttft_s: float | None = None, tpot_s: float | None = None,
                 output_len: int, finish_s: float | None = None, status: str, fail_reason: str | None = None,
                 fail_detail: str | None = None) -> None:
        self.id, self.arrival_s, self.input_len, self.cached_len = id, arrival_s, input_len, cached_len
        self.incremental_len, self.route, self.prefill_node = incremental_len, route, prefill_node
        self.decode_node, self.queue_s, self.prefill_start_s = decode_node, queue_s, prefill_start_s
        self.prefill_end_s, self.transfer_start_s = prefill_end_s, transfer_start_s
        self.transfer_end_s, self.kv_bytes, self.first_token_s = transfer_end_s, kv_bytes, first_token_s
        self.ttft_s, self.tpot_s, self.output_len, self.finish_s = ttft_s, tpot_s, output_len, finish_s
        self.status, self.fail_reason, self.fail_detail = status, fail_reason, fail_detail
        self.__post_init__()

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise TelemetryError(f"request {self.id}: status = {self.status!r}; use one of "
                                 f"{', '.join(s.value for s in RequestStatus)}")
        if self.route is not None and self.route not in ROUTES:
            raise TelemetryError(f"request {self.id}: route = {self.route!r}; use one of "
                                 f"{', '.join(r.value for r in Route)} or None")
        if self.fail_reason is not None and self.fail_reason not in FAIL_REASONS:
            raise TelemetryError(f"request {self.id}: fail_reason = {self.fail_reason!r}; use one of "
                                 f"{', '.join(r.value for r in FailReason)} (words go in fail_detail)")
        if (self.status == _FAILED) != (self.fail_reason is not None):
            raise TelemetryError(f"request {self.id}: {self.status} with fail_reason = "
                                 f"{self.fail_reason!r}; a failed request, and only a failed one, "
                                 "names why (worker_lost, link_down, ...)")


REQUEST_FIELDS: tuple[str, ...] = tuple(f.name for f in fields(RequestRecord))


def summarize(records: Iterable[RequestRecord], duration_s: float) -> dict[str, object]:
    """The run's headline numbers. TTFT/TPOT and prefix hits come from completed requests;
    fractions of requests and of input tokens are of all requests; egress counts the KV bytes of
    PrfaaS-routed requests over the run's duration. None where there is no data (no requests, no
    completed ones, zero duration). `ttft_noqueue_*` is the paper's Table 6 TTFT (`noqueue_ttft_s`);
    the per-node figures (`node_figures`) show a hotspot."""
    records = list(records)
    num = len(records)
    done = [r for r in records if r.status == _COMPLETED]
    ttfts = [r.ttft_s for r in done if r.ttft_s is not None]
    noqueue: list[float] = []
    for r in done:
        service_s = noqueue_ttft_s(r)
        if service_s is not None:
            noqueue.append(service_s)
    tpots = [r.tpot_s for r in done if r.tpot_s is not None]
    remote_kv_bytes = sum(r.kv_bytes or 0 for r in records if r.route == _PRFAAS)
    input_tokens = sum(r.input_len for r in records)
    has_time = duration_s > 0
    egress_bit_per_s = remote_kv_bytes * 8 / duration_s if has_time else None
    prefill_nodes, decode_nodes = node_figures(records, duration_s)
    return {
        "duration_s": duration_s,
        "requests": num,
        "completed": len(done),
        "failed_count": num - len(done),
        "completed_fraction": len(done) / num if num else None,
        "ttft_mean_s": _mean(ttfts),
        "ttft_p50_s": percentile(ttfts, 50),
        "ttft_p90_s": percentile(ttfts, 90),
        "ttft_p99_s": percentile(ttfts, 99),
        "ttft_noqueue_mean_s": _mean(noqueue),
        "ttft_noqueue_p50_s": percentile(noqueue, 50),
        "ttft_noqueue_p90_s": percentile(noqueue, 90),
        "tpot_mean_s": _mean(tpots),
        "throughput_rps": len(done) / duration_s if has_time else None,
        "prfaas_fraction": sum(r.route == _PRFAAS for r in records) / num if num else None,
        "prfaas_input_token_fraction": (sum(r.input_len for r in records if r.route == _PRFAAS) / input_tokens
                                        if input_tokens else None),
        "prefix_hit_fraction": _hit_fraction(done),
        "prefix_hit_fraction_remote": _hit_fraction([r for r in done if r.route == _PRFAAS]),
        "prefix_hit_fraction_local": _hit_fraction([r for r in done if r.route == _LOCAL]),
        "kv_bytes_total": sum(r.kv_bytes or 0 for r in records),
        "egress_gbps_mean": None if egress_bit_per_s is None else egress_bit_per_s / 1e9,
        "egress_bit_per_s_mean": egress_bit_per_s,
        "failed_by_reason": failed_by_reason(records),
        "prefill_nodes": prefill_nodes,
        "decode_nodes": decode_nodes,
    }


def noqueue_ttft_s(record: RequestRecord) -> float | None:
    """The paper's TTFT (Table 6): the prefill service time where the request was prefilled, plus
    the KV transfer left exposed after it (layer-wise streaming hides the rest behind the prefill).
    No queueing: neither the wait for a prefill node nor for a decode batch slot, nor the first
    decode step, as the throughput model's `ttft_noqueue`. None before the prefill ended."""
    start, end = record.prefill_start_s, record.prefill_end_s
    if start is None or end is None:
        return None
    transfer_end = record.transfer_end_s
    exposed = 0.0 if transfer_end is None else max(0.0, transfer_end - end)
    return end - start + exposed


def node_figures(records: list[RequestRecord],
                 duration_s: float) -> tuple[dict[str, dict[str, object]], dict[str, dict[str, object]]]:
    """({prefill node: figures}, {decode node: figures}), nodes in name order, as records name them.

    Prefill node: `requests` prefills it finished, `busy_fraction` their summed service time over
    the duration (a FIFO instance serves one at a time, so at most 1), `queue_mean` the mean number
    waiting for it by Little's law (summed `queue_s` of the requests routed to it over the
    duration). Decode node: `requests` completed there. A node no record names is not listed.
    """
    served: dict[str, int] = {}
    busy_s: dict[str, float] = {}
    queued_s: dict[str, float] = {}
    decoded: dict[str, int] = {}
    for r in records:
        node = r.prefill_node
        if node is not None:
            served.setdefault(node, 0)
            if r.queue_s is not None:
                queued_s[node] = queued_s.get(node, 0.0) + r.queue_s
            if r.prefill_start_s is not None and r.prefill_end_s is not None:
                served[node] += 1
                busy_s[node] = busy_s.get(node, 0.0) + (r.prefill_end_s - r.prefill_start_s)
        if r.decode_node is not None and r.status == _COMPLETED:
            decoded[r.decode_node] = decoded.get(r.decode_node, 0) + 1
    has_time = duration_s > 0
    prefill: dict[str, dict[str, object]] = {}
    for node in sorted(served, key=_node_order):
        prefill[node] = {
            "requests": served[node],
            "busy_fraction": busy_s.get(node, 0.0) / duration_s if has_time else None,
            "queue_mean": queued_s.get(node, 0.0) / duration_s if has_time else None,
        }
    decode: dict[str, dict[str, object]] = {node: {"requests": decoded[node]}
                                            for node in sorted(decoded, key=_node_order)}
    return prefill, decode


def _node_order(name: str) -> tuple[str, int, str]:
    """`local-prefill-10` after `local-prefill-9`: by the name's stem, then its index."""
    stem, _, index = name.rpartition("-")
    return (stem, int(index), "") if index.isdigit() else (name, -1, name)


def _hit_fraction(done: list[RequestRecord]) -> float | None:
    """Cached over input tokens; None without input tokens."""
    total = sum(r.input_len for r in done)
    return sum(r.cached_len for r in done) / total if total else None


def failed_by_reason(records: Iterable[RequestRecord]) -> dict[str, int]:
    """{FailReason value: failed requests}, in the enum's order; reasons no request met are left out."""
    counts = Counter(r.fail_reason for r in records if r.status == _FAILED)
    return {reason.value: counts[reason.value] for reason in FailReason if counts[reason.value]}


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def check_expectations(summary: Mapping[str, object],
                       expect: Mapping[str, Mapping[str, float]]) -> list[str]:
    """One line per unmet bound, e.g. `ttft_p90_s = 12.3 > max 10.0`; [] when all hold.

    `expect` maps a numeric summary metric to bounds `min` and/or `max` (inclusive). An unknown
    metric, an unknown bound or a metric without data fails too, so a typo never passes silently.
    """
    failures = []
    for metric, bounds in expect.items():
        if metric not in summary:
            numeric = sorted(k for k, v in summary.items() if not isinstance(v, dict))
            failures.append(f"{metric}: unknown metric; use one of {', '.join(numeric)}")
            continue
        value = summary[metric]
        for bound, limit in bounds.items():
            failures += _check_bound(metric, value, bound, limit)
    return failures


def _check_bound(metric: str, value: object, bound: str, limit: float) -> list[str]:
    """A bound reads as a float whoever passed it (`max: 2` shows `max 2.0`): compiled (mypyc), a
    `float` parameter turns an int into one, interpreted it does not, and the words must not differ."""
    limit = float(limit)
    if bound not in BOUNDS:
        return [f"{metric}: bound {bound!r} is unknown; use min or max"]
    if isinstance(value, bool) or not isinstance(value, int | float):
        shown = "none (no data)" if value is None else f"{value!r} (not a number)"
        return [f"{metric} = {shown}; expected {bound} {_num(limit)}"]
    if math.isnan(value):
        return [f"{metric} = nan; expected {bound} {_num(limit)}"]
    if bound == "max" and value > limit:
        return [f"{metric} = {_num(value)} > max {_num(limit)}"]
    if bound == "min" and value < limit:
        return [f"{metric} = {_num(value)} < min {_num(limit)}"]
    return []


def _num(x: float) -> str:
    """Short but exact enough: 12.3, 10.0, 0.123457, 3."""
    return repr(round(x, 6)) if isinstance(x, float) else str(x)
