"""MQTT payloads (pydantic, `v` = 1; metrics `v` = 2), topic names, and the validation of control
messages.

Outgoing messages (metrics, events, status, errors) and incoming control knobs live here; how they
travel (the bus) and what the gateway does with a knob do not. Every control payload is checked
against a size cap, a depth cap, JSON, its schema (every number bounded by emulator.limits or the
LinkSpec's own bounds) and, for links, a full `LinkSpec`, before anyone acts on it.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from enum import StrEnum
from typing import Annotated, Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, model_validator

from emulator.errors import LinkSpecError, TelemetryError
from emulator.limits import MAX_CONTROL_BYTES, MAX_NESTING, MAX_RATE_PER_S, MAX_TOKENS
from emulator.net.spec import (
    FIELD_HINTS,
    MAX_BANDWIDTH_MBIT,
    MAX_DELAY_MS,
    LinkSpec,
    parse_link_spec,
)
from emulator.telemetry.bounded_json import loads_bounded
from emulator.validation import format_validation_error

SCHEMA_VERSION = 1
# A payload's `v` changes when a field is renamed or changes unit: metrics went to 2 when egress and
# link capacity moved from Mbit/s (`egress_mbit`) to bit/s (`egress_bit_per_s`).
METRICS_VERSION: Final = 2
TOPIC_ROOT = "prfaas"
KINDS = ("metrics", "events", "status")
MAX_SHOWN_PROBLEMS = 3  # an error line names at most this many problems, then counts the rest
MAX_SHOWN_CHARS = 60  # a value or name from outside is clipped to this in an error line
MAX_ERROR_CHARS = 400  # a whole error line, however many problems it names

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
    link: dict[str, float | None] = {}  # the current LinkSpec's scalar fields


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
    """A message the run refused (bad control payload, ...); shares the events topic."""

    event: Literal["error"] = "error"
    topic: str
    error: str


class StatusMessage(_Message):
    """Where a run stands; `note` carries announced fallbacks (link backend, mqtt) or, after a
    control message, what it changed."""

    state: Literal["starting", "running", "draining", "finished", "failed"]
    engine: str
    link_backend: str | None = None
    note: str = ""
    threshold_tokens: int | None = None  # the router's t when sent: a status follows every knob change
    workload: str = ""  # what of its workload the run plays (emulator/workload/coverage.py)


EventMessage = Annotated[RequestEvent | ErrorEvent, Field(discriminator="event")]
_EVENT_ADAPTER: TypeAdapter[RequestEvent | ErrorEvent] = TypeAdapter(EventMessage)


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
        raise TelemetryError(f"mqtt {kind} message: {_one_line(err)}") from None


# --- control messages --------------------------------------------------------------------------


class Knob(StrEnum):
    THRESHOLD = "threshold"
    POLICY = "policy"
    AFFINITY = "affinity"
    SCHEDULER = "scheduler"
    LINK = "link"
    ARRIVAL_RATE = "arrival_rate"
    PAUSE = "pause"
    RESUME = "resume"


class _Control(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True, allow_inf_nan=False)

    v: Literal[1]


class ThresholdControl(_Control):
    tokens: int = Field(ge=0, le=MAX_TOKENS)


class ThresholdAutoControl(_Control):
    """`"tokens": "auto"`: back to the optimizer's threshold for this run."""

    tokens: Literal["auto"]


class PolicyControl(_Control):
    policy: Literal["prfaas", "local-only", "all-remote"]


class AffinityControl(_Control):
    """How the router picks a prefill node (emulator.control.types.Affinity)."""

    mode: Literal["cost", "longest-prefix", "off"]


class SchedulerControl(_Control):
    short_term: bool | None = None
    long_term: bool | None = None

    @model_validator(mode="after")
    def _something_to_change(self) -> SchedulerControl:
        if self.short_term is None and self.long_term is None:
            raise ValueError("names no scheduler; set short_term and/or long_term")
        return self


class LinkControl(_Control):
    """Only the fields present in the payload change; `bandwidth_mbit: null` means unshaped."""

    bandwidth_mbit: float | None = Field(default=None, gt=0, le=MAX_BANDWIDTH_MBIT)
    delay_ms: float = Field(default=0.0, ge=0, le=MAX_DELAY_MS)
    jitter_ms: float = Field(default=0.0, ge=0, le=MAX_DELAY_MS)
    loss_pct: float = Field(default=0.0, ge=0, le=100)

    @model_validator(mode="after")
    def _something_to_change(self) -> LinkControl:
        if not self.model_fields_set - {"v"}:
            raise ValueError("changes nothing; set bandwidth_mbit, delay_ms, jitter_ms or loss_pct")
        return self


class ArrivalRateControl(_Control):
    rate_per_s: float = Field(gt=0, le=MAX_RATE_PER_S)


class EmptyControl(_Control):
    """pause and resume carry nothing but `v`."""


@dataclass(frozen=True, slots=True)
class SchedulerChange:
    """None leaves that timescale as it is."""

    short_term: bool | None
    long_term: bool | None


@dataclass(frozen=True, slots=True)
class LinkChange:
    """The link fields a control message sets, in payload order; `apply_to` re-validates them."""

    changes: tuple[tuple[str, float | None], ...]

    def apply_to(self, base: LinkSpec) -> LinkSpec:
        try:
            return parse_link_spec(base.model_dump() | dict(self.changes), where="control/link")
        except LinkSpecError as err:
            raise _refusal(str(err).replace("\n", "; ")) from None


ControlValue = int | float | str | bool | SchedulerChange | LinkChange | None


@dataclass(frozen=True, slots=True)
class ControlCommand:
    """A validated knob change. Values: threshold -> int tokens or "auto", policy -> str, affinity
    -> str, scheduler -> SchedulerChange, link -> LinkChange, arrival_rate -> float per second,
    pause/resume -> None."""

    knob: Knob
    value: ControlValue


_MODELS: dict[Knob, type[_Control]] = {
    Knob.THRESHOLD: ThresholdControl, Knob.POLICY: PolicyControl,
    Knob.AFFINITY: AffinityControl, Knob.SCHEDULER: SchedulerControl,
    Knob.LINK: LinkControl, Knob.ARRIVAL_RATE: ArrivalRateControl,
    Knob.PAUSE: EmptyControl, Knob.RESUME: EmptyControl,
}

_HINTS = {
    Knob.THRESHOLD: f'send {{"v": 1, "tokens": N}} with N a whole number in [0, {MAX_TOKENS}] or "auto"',
    Knob.POLICY: 'send {"v": 1, "policy": "prfaas" | "local-only" | "all-remote"}',
    Knob.AFFINITY: 'send {"v": 1, "mode": "cost" | "longest-prefix" | "off"}',
    Knob.SCHEDULER: 'send {"v": 1, "short_term": true | false, "long_term": true | false}',
    Knob.LINK: f'send {{"v": 1}} with any of bandwidth_mbit (in (0, {MAX_BANDWIDTH_MBIT:g}] or '
               f"null), delay_ms and jitter_ms (in [0, {MAX_DELAY_MS:g}]), loss_pct (in [0, 100])",
    Knob.ARRIVAL_RATE: f'send {{"v": 1, "rate_per_s": R}} with 0 < R <= {MAX_RATE_PER_S:g}',
    Knob.PAUSE: 'send {"v": 1}',
    Knob.RESUME: 'send {"v": 1}',
}

_LINK_HINTS = {**FIELD_HINTS, "jitter_ms": f"use 0 for no jitter, at most {MAX_DELAY_MS:g}",
               "v": f"use {SCHEMA_VERSION}"}


def parse_control(knob: str, payload: bytes, link_base: LinkSpec | None = None) -> ControlCommand:
    """Validate one control message; TelemetryError carries one line naming field, value and fix.

    Size and depth are checked before decoding, `v` is required, and every number is bounded, so
    nothing else can leave this function. A link change is checked by merging it onto `link_base`
    (default: an unshaped LinkSpec).
    """
    try:
        known = Knob(knob)
    except ValueError:
        raise TelemetryError(f"control: knob {_clip(repr(knob))} is unknown; use one of "
                             f"{', '.join(k.value for k in Knob)}") from None
    where, hint = f"control/{known.value}", _HINTS[known]
    data = loads_bounded(payload, where, max_bytes=MAX_CONTROL_BYTES, max_depth=MAX_NESTING,
                         fix=hint)
    if not isinstance(data, dict):
        raise TelemetryError(f"{where}: payload is a JSON {type(data).__name__}, "
                             f"not an object; {hint}")
    if "v" not in data:
        raise TelemetryError(f'{where}: v: missing; add "v": {SCHEMA_VERSION}')
    try:
        is_auto = known is Knob.THRESHOLD and data.get("tokens") == "auto"
        model = (ThresholdAutoControl if is_auto else _MODELS[known]).model_validate(data)
    except ValidationError as err:
        if known is Knob.LINK:  # worded as the link's own errors, each fix naming its bounds
            lines = format_validation_error(err, where, model=LinkControl,
                                            hints=_LINK_HINTS).splitlines()
            raise _refusal("; ".join(lines[:MAX_SHOWN_PROBLEMS])) from None
        raise _refusal(f"{where}: {_one_line(err)}; {hint}") from None
    command = ControlCommand(known, _value_of(model))
    if isinstance(command.value, LinkChange):
        command.value.apply_to(link_base or LinkSpec())
    return command


def _value_of(model: _Control) -> ControlValue:
    match model:
        case ThresholdControl() | ThresholdAutoControl():
            return model.tokens
        case PolicyControl():
            return model.policy
        case AffinityControl():
            return model.mode
        case SchedulerControl():
            return SchedulerChange(model.short_term, model.long_term)
        case LinkControl():
            fields = [f for f in LinkControl.model_fields if f in model.model_fields_set - {"v"}]
            return LinkChange(tuple((f, getattr(model, f)) for f in fields))
        case ArrivalRateControl():
            return model.rate_per_s
    return None


def _one_line(err: ValidationError) -> str:
    """Each problem as `field = value: what is wrong`, joined with '; '; values and names from
    outside are clipped and at most MAX_SHOWN_PROBLEMS are named, so the line stays short."""
    parts = []
    errors = err.errors(include_url=False)
    for e in errors[:MAX_SHOWN_PROBLEMS]:
        field = _clip(".".join(str(p) for p in e["loc"])) or "payload"
        if e["type"] == "extra_forbidden":
            parts.append(f"{field} is not a known field; remove it")
        elif e["type"] == "missing":
            parts.append(f"{field} is missing")
        elif not e["loc"]:
            parts.append(f"payload {e['msg'].removeprefix('Value error, ')}")
        else:
            parts.append(f"{field} = {_clip(_shown(e.get('input')))} is invalid "
                         f"({_clip(e['msg'].lower(), 2 * MAX_SHOWN_CHARS)})")
    if len(errors) > MAX_SHOWN_PROBLEMS:
        parts.append(f"and {len(errors) - MAX_SHOWN_PROBLEMS} more problems")
    return "; ".join(parts)


def _shown(value: object) -> str:
    """A refused value as JSON; a huge int is summarised, never converted to 4,000 digits."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > 10**18:
        return f"<a number of about {int(value.bit_length() * math.log10(2)) + 1} digits>"
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return json.dumps(value, default=str)


def _refusal(line: str) -> TelemetryError:
    """A refused control message: one line of at most MAX_ERROR_CHARS, however many problems."""
    return TelemetryError(_clip(line, MAX_ERROR_CHARS))


def _clip(text: str, limit: int = MAX_SHOWN_CHARS) -> str:
    text = text if text.isprintable() else repr(text)[1:-1]
    return text if len(text) <= limit else text[: limit - 3] + "..."
