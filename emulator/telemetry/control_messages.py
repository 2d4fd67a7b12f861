"""Control messages (`prfaas/<run>/control/<knob>`): the knobs, their payload schemas and their
validation into a ControlCommand. Every payload is checked against a size cap, a depth cap, JSON
(no key given twice), an integer `v`, its schema (every number bounded by emulator.limits or the
LinkSpec's own bounds) and, for links, a full `LinkSpec`, before anyone acts on it. What the
gateway does with a knob lives elsewhere.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from emulator.errors import LinkSpecError, TelemetryError
from emulator.limits import MAX_CONTROL_BYTES, MAX_NESTING, MAX_RATE_PER_S, MAX_TOKENS, MIN_RATE_PER_S
from emulator.net.spec import (
    FIELD_HINTS,
    MAX_BANDWIDTH_MBIT,
    MAX_DELAY_MS,
    MIN_BANDWIDTH_MBIT,
    MIN_DELAY_MS,
    DelayMs,
    JitterMs,
    LinkSpec,
    Percent,
    parse_link_spec,
)
from emulator.telemetry.bounded_json import loads_bounded
from emulator.telemetry.payload_errors import MAX_SHOWN_PROBLEMS, clip, one_line, refusal, shown
from emulator.telemetry.schemas import SCHEMA_VERSION
from emulator.validation import format_validation_error


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

    bandwidth_mbit: float | None = Field(default=None, ge=MIN_BANDWIDTH_MBIT, le=MAX_BANDWIDTH_MBIT)
    delay_ms: DelayMs = 0.0  # the LinkSpec's own types: the same bounds (emulator.net.spec)
    jitter_ms: JitterMs = 0.0
    loss_pct: Percent = 0.0

    @model_validator(mode="after")
    def _something_to_change(self) -> LinkControl:
        if not self.model_fields_set - {"v"}:
            raise ValueError("changes nothing; set bandwidth_mbit, delay_ms, jitter_ms or loss_pct")
        return self


class ArrivalRateControl(_Control):
    rate_per_s: float = Field(ge=MIN_RATE_PER_S, le=MAX_RATE_PER_S)


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
            raise refusal(str(err).replace("\n", "; ")) from None


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
    Knob.LINK: f'send {{"v": 1}} with any of bandwidth_mbit (in [{MIN_BANDWIDTH_MBIT:g}, {MAX_BANDWIDTH_MBIT:g}] '
               f"or null), delay_ms and jitter_ms (0 or in [{MIN_DELAY_MS:g}, {MAX_DELAY_MS:g}]), loss_pct (in "
               "[0, 100])",
    Knob.ARRIVAL_RATE: f'send {{"v": 1, "rate_per_s": R}} with {MIN_RATE_PER_S:g} <= R <= {MAX_RATE_PER_S:g}',
    Knob.PAUSE: 'send {"v": 1}',
    Knob.RESUME: 'send {"v": 1}',
}

_LINK_HINTS = {**FIELD_HINTS, "v": f"use {SCHEMA_VERSION}"}


def parse_control(knob: str, payload: bytes, link_base: LinkSpec | None = None) -> ControlCommand:
    """Validate one control message; TelemetryError carries one line naming field, value and fix.

    Size and depth are checked before decoding, `v` is required, and every number is bounded, so
    nothing else can leave this function. A link change is checked by merging it onto `link_base`
    (default: an unshaped LinkSpec).
    """
    try:
        known = Knob(knob)
    except ValueError:
        raise TelemetryError(f"control: knob {clip(repr(knob))} is unknown; use one of "
                             f"{', '.join(k.value for k in Knob)}") from None
    where, hint = f"control/{known.value}", _HINTS[known]
    data = loads_bounded(payload, where, max_bytes=MAX_CONTROL_BYTES, max_depth=MAX_NESTING,
                         fix=hint)
    if not isinstance(data, dict):
        raise TelemetryError(f"{where}: payload is a JSON {type(data).__name__}, "
                             f"not an object; {hint}")
    if "v" not in data:
        raise TelemetryError(f'{where}: v: missing; add "v": {SCHEMA_VERSION}')
    _check_version(where, data["v"])
    try:
        is_auto = known is Knob.THRESHOLD and data.get("tokens") == "auto"
        model = (ThresholdAutoControl if is_auto else _MODELS[known]).model_validate(data)
    except ValidationError as err:
        if known is Knob.LINK:  # worded as the link's own errors, each fix naming its bounds
            lines = format_validation_error(err, where, model=LinkControl,
                                            hints=_LINK_HINTS).splitlines()
            raise refusal("; ".join(lines[:MAX_SHOWN_PROBLEMS])) from None
        raise refusal(f"{where}: {one_line(err)}; {hint}") from None
    command = ControlCommand(known, _value_of(model))
    if isinstance(command.value, LinkChange):
        command.value.apply_to(link_base or LinkSpec())
    return command


def _check_version(where: str, version: object) -> None:
    """`v` is the integer SCHEMA_VERSION: `true == 1` and `1.0 == 1` in Python, and pydantic's
    Literal[1] lets both through, so the type is checked here, by identity, not equality."""
    if type(version) is not int or version != SCHEMA_VERSION:
        raise TelemetryError(f"{where}: v = {clip(shown(version))} is not the schema version; "
                             f'send "v": {SCHEMA_VERSION} (an integer: not true, 1.0 or "1")')


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


