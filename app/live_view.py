"""What the Live page shows of a run: a bounded, thread-safe buffer of the MQTT messages received
per run id, and the tables and phases built from it.

Pure: nothing here subscribes, publishes or starts a run (`app.mqtt_feed` fills the buffer, the run
API starts runs), so tests feed it messages by hand. Times called `at_s` are the receiver's
`time.monotonic()`; `t_s` is the run's own clock (seconds since it started).
"""

from __future__ import annotations

import threading
from collections import OrderedDict, deque
from dataclasses import dataclass, field

import pandas as pd
from pydantic import BaseModel

from emulator.telemetry.labels import KNOB_LABELS
from emulator.telemetry.schemas import ErrorEvent, MetricsSnapshot, NoteEvent, RequestEvent, StatusMessage

MAX_RUNS = 32  # runs remembered; the least recently heard-from is forgotten first
MAX_SNAPSHOTS = 1200  # 10 minutes at the gateway's 2 Hz
MAX_EVENTS = 4000  # request lifecycle events: about 8 per request
MAX_ERRORS = 50
MAX_NOTES = 500  # knob changes and scheduler decisions: a few per minute
RECENT_WINDOW_S = 10.0  # the "recent" share routed remote looks this far back
STALE_S = 30.0  # a run with no status that has been silent this long is taken to be over
TABLE_ROWS = 15
ENDED_STATES = ("finished", "stopped", "failed")
# The Live page's tiles by what they show, titled as the page shows them (the Classroom tour names them).
TILES = {
    "state": "State", "link_backend": "Link backend", "run_time": "Run time (s)",
    "arrived": "Completed / arrived", "failed": "Failed", "threshold": "Threshold (tokens)",
    "link": "Link", "arrivals": "Arrivals",
    "simulated_time": "Simulated time (s)", "ended": "Requests ended",
    "completed": "Completed", "failed_count": "Failed", "ttft_p50_s": "TTFT P50 (s)", "ttft_p90_s": "TTFT P90 (s)",
    "prfaas_fraction": "Routed remote", "throughput_rps": "Throughput (req/s)",
    "lambda_max_model": "Λ_max, model (req/s)",
}
KNOB_TITLES = {"rate": KNOB_LABELS["rate_per_s"], "pause": "Pause arrivals"}  # knobs the tour names


@dataclass
class _RunBuffer:
    metrics: deque[tuple[float, MetricsSnapshot]]
    events: deque[tuple[float, RequestEvent]]
    errors: deque[tuple[float, ErrorEvent]]
    notes: deque[tuple[float, NoteEvent]]
    status: tuple[float, StatusMessage] | None = None
    version: int = 0
    last_at_s: float = 0.0


@dataclass(frozen=True, slots=True)
class RunView:
    """A consistent copy of one run's buffer, safe to read while the feed keeps appending."""

    run_id: str
    metrics: tuple[MetricsSnapshot, ...] = ()
    metrics_at_s: tuple[float, ...] = ()
    events: tuple[RequestEvent, ...] = ()
    errors: tuple[tuple[float, ErrorEvent], ...] = ()
    notes: tuple[NoteEvent, ...] = ()  # the run's knob and decision log, as it happened
    notes_at_s: tuple[float, ...] = ()
    status: StatusMessage | None = None
    version: int = 0
    last_at_s: float | None = None  # when anything of this run last arrived

    @property
    def latest(self) -> MetricsSnapshot | None:
        return self.metrics[-1] if self.metrics else None


@dataclass
class FeedBuffer:
    """Messages per run id, each kind in its own bounded deque; the oldest fall out first."""

    max_runs: int = MAX_RUNS
    max_snapshots: int = MAX_SNAPSHOTS
    max_events: int = MAX_EVENTS
    _runs: OrderedDict[str, _RunBuffer] = field(default_factory=OrderedDict)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _changed: threading.Condition = field(init=False)

    def __post_init__(self) -> None:
        self._changed = threading.Condition(self._lock)  # notified on every message filed

    def add(self, run_id: str, message: BaseModel, at_s: float) -> None:
        """File one parsed message (metrics, request or error event, status) under its run."""
        with self._lock:
            run = self._runs.get(run_id)
            if run is None:
                run = _RunBuffer(deque(maxlen=self.max_snapshots), deque(maxlen=self.max_events),
                                 deque(maxlen=MAX_ERRORS), deque(maxlen=MAX_NOTES))
                self._runs[run_id] = run
                while len(self._runs) > self.max_runs:
                    self._runs.popitem(last=False)
            self._runs.move_to_end(run_id)
            if isinstance(message, MetricsSnapshot):
                run.metrics.append((at_s, message))
            elif isinstance(message, RequestEvent):
                run.events.append((at_s, message))
            elif isinstance(message, ErrorEvent):
                run.errors.append((at_s, message))
            elif isinstance(message, NoteEvent):
                run.notes.append((at_s, message))
            elif isinstance(message, StatusMessage):
                run.status = (at_s, message)
            else:
                raise TypeError(f"feed buffer: cannot file a {type(message).__name__}")
            run.version += 1
            run.last_at_s = at_s
            self._changed.notify_all()

    def view(self, run_id: str) -> RunView:
        """The run's messages so far; an empty view for a run never heard from."""
        with self._lock:
            run = self._runs.get(run_id)
            if run is None:
                return RunView(run_id)
            return RunView(
                run_id, tuple(m for _, m in run.metrics), tuple(at for at, _ in run.metrics),
                tuple(e for _, e in run.events), tuple(run.errors), tuple(n for _, n in run.notes),
                tuple(at for at, _ in run.notes), run.status[1] if run.status else None, run.version,
                run.last_at_s,
            )

    def version(self, run_id: str) -> int:
        with self._lock:
            return self._version(run_id)

    def wait_for_news(self, run_id: str, version: int, timeout_s: float) -> int:
        """Block until a message of `run_id` newer than `version` is filed, or `timeout_s` passes;
        returns the run's version then. Lets a page redraw the moment the run answers (push)."""
        with self._changed:
            self._changed.wait_for(lambda: self._version(run_id) != version, timeout=max(timeout_s, 0.0))
            return self._version(run_id)

    def _version(self, run_id: str) -> int:
        run = self._runs.get(run_id)
        return run.version if run is not None else 0

    def run_ids(self) -> list[str]:
        """Runs heard from, the most recent first."""
        with self._lock:
            return list(reversed(self._runs))


# --- where a run stands ------------------------------------------------------------------------


def bus_phase(view: RunView, now_s: float) -> str:
    """From the bus alone: "waiting" (nothing yet), "running", or "ended" (a final status, or
    silent for STALE_S)."""
    if view.status is not None and view.status.state in ENDED_STATES:
        return "ended"
    if view.last_at_s is None:
        return "waiting"
    if now_s - view.last_at_s > STALE_S:
        return "ended"
    return "running" if view.metrics else "waiting"


def run_phase(view: RunView, now_s: float, engine: str | None = None,
              process_running: bool | None = None) -> str:
    """What the page does with a run: "waiting", "running" (knobs on), "virtual" (no telemetry
    until it ends) or "ended". `process_running` is known for runs started from this server."""
    if process_running is False:
        return "ended"
    if engine == "virtual":
        return "virtual"
    phase = bus_phase(view, now_s)
    if process_running and phase == "ended" and (view.status is None or view.status.state not in ENDED_STATES):
        # our own child, silent but alive: still starting (calibrating its workers on a loaded
        # machine can take longer than STALE_S), or running without a broker
        return "running" if view.metrics else "waiting"
    return phase


# --- tables ------------------------------------------------------------------------------------


METRIC_COLUMNS = ("t_s", "ttft_p50_s", "ttft_p90_s", "threshold_tokens", "egress_bit_per_s",
                  "link_capacity_bit_per_s", "retrans_rate", "rtt_ms", "remote_prefill", "local_prefill",
                  "decode", "arrived", "completed", "failed", "in_flight", "prfaas", "routed",
                  "remote_share")


def metrics_frame(snapshots: tuple[MetricsSnapshot, ...] | list[MetricsSnapshot]) -> pd.DataFrame:
    """One row per snapshot, in the run's time order, with the columns the live charts plot."""
    rows = []
    for s in snapshots:
        routed = s.requests.prfaas + s.requests.local
        rows.append({
            "t_s": s.t_s, "ttft_p50_s": s.ttft_p50_s, "ttft_p90_s": s.ttft_p90_s,
            "threshold_tokens": s.threshold_tokens, "egress_bit_per_s": s.egress_bit_per_s,
            "link_capacity_bit_per_s": s.link_capacity_bit_per_s, "retrans_rate": s.retrans_rate,
            "rtt_ms": s.rtt_ms, "remote_prefill": s.queues.remote_prefill,
            "local_prefill": s.queues.local_prefill, "decode": s.queues.decode,
            "arrived": s.requests.arrived, "completed": s.requests.completed,
            "failed": s.requests.failed, "in_flight": s.requests.in_flight,
            "prfaas": s.requests.prfaas, "routed": routed,
            "remote_share": s.requests.prfaas / routed if routed else None,
        })
    frame = pd.DataFrame(rows, columns=METRIC_COLUMNS).sort_values("t_s", kind="stable")
    frame = frame.reset_index(drop=True).astype({"remote_share": "float64"})
    frame["recent_remote_share"] = _recent_share(frame)
    return frame


def recorded_frame(requests: pd.DataFrame, timeseries: pd.DataFrame) -> pd.DataFrame:
    """A recorded run (a virtual one, or any run once it has ended) in metrics_frame's columns, so
    the Live page draws it with the same charts. The share routed remote, which the timeseries does
    not hold, comes from the requests' routes by arrival time."""
    frame = timeseries.rename(columns={"queue_remote_prefill": "remote_prefill",
                                       "queue_local_prefill": "local_prefill", "queue_decode": "decode"})
    routed = requests[requests["route"].notna()].sort_values("arrival_s", kind="stable")
    arrivals = routed["arrival_s"].to_numpy()
    remote = (routed["route"] == "prfaas").to_numpy().cumsum()
    upto = arrivals.searchsorted(frame["t_s"].to_numpy(), side="right")  # routed by each sample
    frame["routed"] = upto
    frame["prfaas"] = [int(remote[n - 1]) if n else 0 for n in upto]
    frame["remote_share"] = [p / n if n else None for p, n in zip(frame["prfaas"], upto, strict=True)]
    frame = frame.reindex(columns=METRIC_COLUMNS).sort_values("t_s", kind="stable").reset_index(drop=True)
    frame = frame.astype({"remote_share": "float64"})
    frame["recent_remote_share"] = _recent_share(frame)
    return frame


def _recent_share(frame: pd.DataFrame) -> pd.Series:
    """The share routed remote among requests routed in the last RECENT_WINDOW_S seconds."""
    if frame.empty:
        return pd.Series(dtype="float64")
    times = frame["t_s"].to_numpy()
    starts = times.searchsorted(times - RECENT_WINDOW_S, side="left")
    prfaas, routed = frame["prfaas"].to_numpy(), frame["routed"].to_numpy()
    new_prfaas, new_routed = prfaas - prfaas[starts], routed - routed[starts]
    share = [p / r if r > 0 else None for p, r in zip(new_prfaas, new_routed, strict=True)]
    return pd.Series(share, dtype="float64")


REQUEST_COLUMNS = ("request", "status", "route", "input_len", "ttft_s", "queue_s", "prefill_s",
                   "transfer_s", "node", "reason")


def requests_table(events: tuple[RequestEvent, ...] | list[RequestEvent],
                   limit: int = TABLE_ROWS) -> pd.DataFrame:
    """The last `limit` requests to arrive, newest first, with route, reason and TTFT breakdown:
    queue (arrival to prefill start), prefill, exposed transfer (prefill end to KV arrival)."""
    stamps: dict[str, dict[str, RequestEvent]] = {}
    for event in events:
        stamps.setdefault(event.request_id, {})[event.event] = event
    rows = sorted((_request_row(rid, by_kind) for rid, by_kind in stamps.items()),
                  key=lambda pair: pair[0], reverse=True)
    table = pd.DataFrame([row for _, row in rows[:limit]], columns=REQUEST_COLUMNS)
    words = ["route", "node", "reason"]  # not known yet reads "-", not "None"
    table[words] = table[words].astype("object").where(table[words].notna(), "-")
    return table


def _request_row(rid: str, by_kind: dict[str, RequestEvent]) -> tuple[float, dict]:
    """(arrival time, the table row) of one request."""
    def at(kind: str) -> float | None:
        event = by_kind.get(kind)
        return event.t_s if event is not None else None

    def gap(start: str, end: str) -> float | None:
        a, b = at(start), at(end)
        return max(b - a, 0.0) if a is not None and b is not None else None

    routed, arrived = by_kind.get("routed"), by_kind.get("arrived")
    first = by_kind.get("first_token") or by_kind.get("completed")
    status = ("failed" if "failed" in by_kind else "completed" if "completed" in by_kind
              else "decoding" if "first_token" in by_kind else "prefilling" if "prefill_start" in by_kind
              else "queued")
    reason = routed.reason if routed is not None else None
    if "failed" in by_kind:
        reason = by_kind["failed"].reason
    latest = max(by_kind.values(), key=lambda e: e.t_s)
    input_len = arrived.detail.get("input_len") if arrived is not None else None
    arrived_t = arrived.t_s if arrived is not None else latest.t_s
    return arrived_t, {
        "request": rid, "status": status, "route": latest.route, "reason": reason,
        "node": routed.node if routed is not None else None,
        "input_len": int(input_len) if input_len is not None else None,
        "queue_s": gap("arrived", "prefill_start"), "prefill_s": gap("prefill_start", "prefill_end"),
        "transfer_s": gap("prefill_end", "transfer_end"),
        "ttft_s": first.detail.get("ttft_s") if first is not None else None,
    }


def roles_table(snapshot: MetricsSnapshot | None) -> pd.DataFrame:
    """Each node's current role, host (its machine) and device (cuda:1, cpu; None until the run
    knows), remote nodes first."""
    roles = snapshot.roles if snapshot is not None else {}
    devices = snapshot.devices if snapshot is not None else {}
    hosts = snapshot.hosts if snapshot is not None else {}
    rows = [{"node": node, "role": role, "host": hosts.get(node), "device": devices.get(node)}
            for node, role in sorted(roles.items())]
    rows.sort(key=lambda row: not row["node"].startswith("remote"))
    return pd.DataFrame(rows, columns=("node", "role", "host", "device"))
