"""MQTT payloads (pydantic, `v` = 1; metrics `v` = 2) the runs publish, and topic names.

Outgoing messages (metrics, events, status, errors) live here; incoming control knobs are
emulator/telemetry/control_messages.py's, and how messages travel (the bus) is not here either.
"""

from __future__ import annotations

from typing import Annotated, Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from emulator.errors import TelemetryError
from emulator.limits import MAX_DURATION_S
from emulator.telemetry.payload_errors import one_line

SCHEMA_VERSION = 1
# A payload's `v` changes when a field is renamed or changes unit: metrics went to 2 when egress and
# link capacity moved from Mbit/s (`egress_mbit`) to bit/s (`egress_bit_per_s`).
METRICS_VERSION: Final = 2
TOPIC_ROOT = "prfaas"
KINDS = ("metrics", "events", "status")
MAX_NOTE_CHARS = 2_000  # a scheduler decision names its figures; nothing longer is one line

# --- outgoing messages -------------------------------------------------------------------------


class _Payload(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class _Message(_Payload):
    v: Literal[1] = 1
    run_id: str = Field(min_length=1)
    t_s: float = Field(ge=0)  # seconds since the run started


class RequestCounts(BaseModel):
    """Requests so far, by status and by route (a request counts once in each)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    arrived: int = Field(default=0, ge=0)
    completed: int = Field(default=0, ge=0)
    failed: int = Field(default=0, ge=0)
    in_flight: int = Field(default=0, ge=0)
    prfaas: int = Field(default=0, ge=0)
    local: int = Field(default=0, ge=0)


class QueueDepths(BaseModel):
    """Requests waiting per pool, summed over the pool's nodes."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    remote_prefill: int = Field(default=0, ge=0)
    local_prefill: int = Field(default=0, ge=0)
    decode: int = Field(default=0, ge=0)


class KnobState(BaseModel):
    """The knobs a snapshot's other fields do not carry, as they stand when it is sent: the Live
    page's widgets follow them, whoever turned them (the timeline, the scheduler, any client)."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    policy: Literal["prfaas", "local-only", "all-remote"]
    affinity: Literal["cost", "longest-prefix", "off"]
    has_scheduler: bool = False  # False: the scenario runs no scheduler, and its loops cannot be turned on
    short_term: bool = False
    long_term: bool = False
    rate_per_s: float | None = Field(default=None, gt=0)  # in force; a trace replay's is a factor on its pace
    is_paused: bool = False


class MetricsSnapshot(_Payload):
    """What the dashboard plots, published at >= 2 Hz. None means "no data yet" or "unshaped".
    Rates are bit/s; the recorder flattens a snapshot into a timeseries row (`snapshot_row`)."""

    v: Literal[2] = METRICS_VERSION
    run_id: str = Field(min_length=1)
    t_s: float = Field(ge=0)  # seconds since the run started
    ttft_p50_s: float | None = Field(default=None, ge=0)
    ttft_p90_s: float | None = Field(default=None, ge=0)
    requests: RequestCounts = RequestCounts()
    queues: QueueDepths = QueueDepths()
    egress_bit_per_s: float = Field(default=0.0, ge=0)
    link_capacity_bit_per_s: float | None = Field(default=None, gt=0)
    link_utilization: float | None = Field(default=None, ge=0)
    retrans_rate: float | None = Field(default=None, ge=0)
    rtt_ms: float | None = Field(default=None, ge=0)
    threshold_tokens: int | None = Field(default=None, ge=0)
    roles: dict[str, str] = {}  # node id -> "prefill" | "decode"
    devices: dict[str, str] = {}  # node id -> "cuda:1" | "cpu" (live workers, where known)
    hosts: dict[str, str] = {}  # node id -> the machine it runs on (its Ray node's address, or this host's name)
    link: dict[str, float | None] = {}  # the current LinkSpec's scalar fields
    knobs: KnobState | None = None  # the other knobs as they stand (None: a sender that does not say)


LifecycleEvent = Literal["arrived", "routed", "prefill_start", "prefill_end", "transfer_end",
                         "first_token", "completed", "failed"]


class RequestEvent(_Message):
    """One step of one request's life, as the gateway saw it."""

    request_id: str = Field(min_length=1)
    event: LifecycleEvent
    route: Literal["prfaas", "local"] | None = None
    node: str | None = None
    reason: str | None = None
    detail: dict[str, float] = {}  # numbers worth a glance: input_len, kv_bytes, ttft_s, ...


class ErrorEvent(_Message):
    """A message the run refused (bad control payload, ...); shares the events topic. At most one is
    sent a second (emulator/telemetry/error_echo.py): `num_suppressed` counts the refusals since the
    previous one that were not shown."""

    event: Literal["error"] = "error"
    topic: str
    error: str
    num_suppressed: int = Field(default=0, ge=0)


class NoteEvent(_Message):
    """A line of the run's knob or decision log as it happens (the record's meta.decisions and
    meta.knob_changes hold the same lines): what a knob, the timeline or the scheduler changed."""

    event: Literal["note"] = "note"
    source: Literal["scheduler", "control", "timeline"]
    what: str = Field(max_length=MAX_NOTE_CHARS)


class StatusMessage(_Message):
    """Where a run stands; `note` carries announced fallbacks (link backend, mqtt) or, after a
    control message, what it changed."""

    state: Literal["starting", "running", "draining", "finished", "stopped", "failed"]  # the last three are final
    engine: str
    link_backend: str | None = None
    link_backend_reason: str = ""  # why this backend, whatever the latest note says
    note: str = ""
    threshold_tokens: int | None = None  # the router's t when sent: a status follows every knob change
    workload: str = ""  # what of its workload the run plays (emulator/workload/coverage.py)
    duration_s: float | None = Field(default=None, gt=0, le=MAX_DURATION_S)  # arrivals stop then


EventMessage = Annotated[RequestEvent | ErrorEvent | NoteEvent, Field(discriminator="event")]
_EVENT_ADAPTER: TypeAdapter[RequestEvent | ErrorEvent | NoteEvent] = TypeAdapter(EventMessage)


# --- topics ------------------------------------------------------------------------------------


def _check_segment(what: str, value: str) -> str:
    if not value or any(c in value for c in "/+#\0"):
        raise TelemetryError(f"mqtt topic: {what} {value!r} is empty or holds '/', '+', '#'; "
                             "use letters, digits, '-' and '_'")
    return value


def topic(run_id: str, kind: str) -> str:
    """`prfaas/<run>/<kind>` for kind in metrics, events, status."""
    if kind not in KINDS:
        raise TelemetryError(f"mqtt topic: kind {kind!r} is unknown; use one of {', '.join(KINDS)}")
    return f"{TOPIC_ROOT}/{_check_segment('run id', run_id)}/{kind}"


def control_topic(run_id: str, knob: str) -> str:
    """`prfaas/<run>/control/<knob>`; `knob="#"` gives the subscription filter for all knobs."""
    knob = knob if knob == "#" else _check_segment("knob", knob)
    return f"{TOPIC_ROOT}/{_check_segment('run id', run_id)}/control/{knob}"


def knob_of(run_id: str, control_topic_name: str) -> str:
    """The knob part of a control topic (anything after `control/`, even with more slashes)."""
    return control_topic_name.removeprefix(f"{TOPIC_ROOT}/{run_id}/control/")


def parse_message(kind: str, payload: bytes) -> BaseModel:
    """Decode a received metrics/events/status payload: for subscribers such as the dashboard."""
    models: dict[str, Any] = {"metrics": MetricsSnapshot, "status": StatusMessage}
    if kind not in KINDS:
        raise TelemetryError(f"mqtt message: kind {kind!r} is unknown; "
                             f"use one of {', '.join(KINDS)}")
    try:
        if kind == "events":
            return _EVENT_ADAPTER.validate_json(payload)
        return models[kind].model_validate_json(payload)
    except ValidationError as err:
        raise TelemetryError(f"mqtt {kind} message: {one_line(err)}") from None
