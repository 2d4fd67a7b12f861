"""The knob registry: every lever on a running scenario, defined ONCE (its scenario path, its MQTT
control name, its type and bounds, whether `auto` applies, its effect and the words it reports).

MQTT control messages (telemetry.schemas), the timeline's `set:` (scenario.rules), `--set`
(scenario.overrides), the dashboard's widgets and both engines read it. Sans-I/O: applying a knob
writes the run's ControlState and returns the words plus, for a lever outside the control plane
(the link, the arrival clock, the local split), an action the engine performs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, TypeVar

from emulator.control.control_state import ControlState
from emulator.control.types import Affinity, RoutePolicy
from emulator.errors import ScenarioError
from emulator.limits import MAX_INSTANCES, MAX_RATE_PER_S, MAX_TOKENS, MIN_RATE_PER_S
from emulator.net.spec import (
    MAX_BANDWIDTH_MBIT,
    MAX_DELAY_MS,
    MIN_BANDWIDTH_MBIT,
    MIN_DELAY_MS,
    LinkSpec,
    parse_link_spec,
)
from emulator.telemetry.control_messages import ControlCommand, Knob, LinkChange, SchedulerChange

AUTO = "auto"
LINK_PREFIX = "link."
T = TypeVar("T")


class ValueKind(StrEnum):
    TOKENS = "tokens"  # a whole number of tokens in [low, high]
    COUNT = "count"  # a whole number of instances in [low, high]
    RATE = "rate"  # a number in [low, high]
    FLAG = "flag"
    POLICY = "policy"
    AFFINITY = "affinity"  # cost, longest-prefix or off
    LINK = "link"  # a link field, checked by the link's own schema
    NONE = "none"  # pause and resume carry no value


@dataclass(frozen=True, slots=True)
class KnobSpec:
    """One knob. `path` is None for a knob only a control message turns (pause, resume);
    `control` is None for one no control message carries; `field` names its value in that message.

    Bounds are physical, not just a type's (issue 25): a value lies in [low, high] and, unless it is
    exactly 0, is at least `min_nonzero` (a delay is none or at least 1 microsecond). Every source
    enforces them: the scenario schema and `--set` (emulator.net.spec's LinkSpec, emulator.scenario),
    the timeline and control messages (`check` below, telemetry.control_messages); the numbers live
    in emulator.limits and emulator.net.spec, and tests/emulator/test_knob_bounds.py holds every
    source to them across the whole float range."""

    path: str | None
    control: Knob | None
    field: str | None
    kind: ValueKind
    low: float
    high: float
    allows_auto: bool
    help: str
    min_nonzero: float = 0.0


def _link(field: str, low: float, high: float, help: str, min_nonzero: float = 0.0) -> KnobSpec:
    return KnobSpec(LINK_PREFIX + field, Knob.LINK, field, ValueKind.LINK, low, high, False, help, min_nonzero)


REGISTRY: tuple[KnobSpec, ...] = (
    KnobSpec("router.threshold_tokens", Knob.THRESHOLD, "tokens", ValueKind.TOKENS, 0, MAX_TOKENS, True,
             "incremental length above which a prefill goes remote (or auto)"),
    KnobSpec("router.policy", Knob.POLICY, "policy", ValueKind.POLICY, 0, 0, False,
             "prfaas, local-only (homogeneous PD) or all-remote (naive heterogeneous)"),
    KnobSpec("router.affinity", Knob.AFFINITY, "mode", ValueKind.AFFINITY, 0, 0, False,
             "prefill node: cost (least estimated TTFT), longest-prefix or off (least loaded)"),
    KnobSpec("scheduler.short_term.enabled", Knob.SCHEDULER, "short_term", ValueKind.FLAG, 0, 1, False,
             "the seconds-scale threshold re-search"),
    KnobSpec("scheduler.long_term.enabled", Knob.SCHEDULER, "long_term", ValueKind.FLAG, 0, 1, False,
             "the minutes-scale prefill/decode re-split"),
    KnobSpec("clusters.local.prefill_instances", None, None, ValueKind.COUNT, 0, MAX_INSTANCES, False,
             "local instances that prefill; the rest decode"),
    KnobSpec("workload.arrival.rate_per_s", Knob.ARRIVAL_RATE, "rate_per_s", ValueKind.RATE, MIN_RATE_PER_S,
             MAX_RATE_PER_S, False, "arrival rate of a generated workload", MIN_RATE_PER_S),
    _link("bandwidth_mbit", MIN_BANDWIDTH_MBIT, MAX_BANDWIDTH_MBIT,
          "cross-datacenter bandwidth, Mbit/s (null = unshaped; loss_pct 100 cuts the link)", MIN_BANDWIDTH_MBIT),
    _link("delay_ms", 0, MAX_DELAY_MS, "one-way added delay, ms (0, or at least 0.001)", MIN_DELAY_MS),
    _link("loss_pct", 0, 100, "random packet loss, % (100 cuts the link)"),
    _link("jitter_ms", 0, MAX_DELAY_MS, "delay jitter, ms (0, or at least 0.001)", MIN_DELAY_MS),
    KnobSpec(None, Knob.PAUSE, None, ValueKind.NONE, 0, 0, False, "hold arrivals (live: the wall clock)"),
    KnobSpec(None, Knob.RESUME, None, ValueKind.NONE, 0, 0, False, "let arrivals flow again"),
)
BY_PATH: dict[str, KnobSpec] = {k.path: k for k in REGISTRY if k.path is not None}
POLICIES: tuple[str, ...] = tuple(p.value for p in RoutePolicy)
AFFINITIES: tuple[str, ...] = tuple(a.value for a in Affinity)


def knob(path: str) -> KnobSpec:
    """The knob at a scenario path; ScenarioError (one line, the known paths) for any other."""
    found = BY_PATH.get(path)
    if found is None:
        raise ScenarioError(f"timeline.set: {shown(path)} is not a knob; use one of {', '.join(BY_PATH)}")
    return found


# --- what applying a knob asks of the engine (the control state it writes itself) ----------------


@dataclass(frozen=True, slots=True)
class SetLink:
    spec: LinkSpec


@dataclass(frozen=True, slots=True)
class SetRate:
    rate_per_s: float


@dataclass(frozen=True, slots=True)
class SetSplit:
    num_prefill: int  # the engine drains and flips local nodes toward it, and words what it did


@dataclass(frozen=True, slots=True)
class Pause:
    resume: bool  # False: hold arrivals; True: let them flow again


Action = SetLink | SetRate | SetSplit | Pause


@dataclass(frozen=True, slots=True)
class KnobEffect:
    """What a knob did, in words, and what the engine must still do (None: nothing)."""

    words: str
    action: Action | None = None


def apply_setting(state: ControlState, path: str, value: Any, *, link: LinkSpec,
                  has_scheduler: bool) -> KnobEffect:
    """One `set:` entry of the timeline. The value is checked against the knob's type and bounds
    (never converted), so a value the schema would refuse changes nothing."""
    spec, where = knob(path), f"timeline.set.{path}"
    if spec.kind is ValueKind.LINK:
        assert spec.field is not None
        return link_effect(parse_link_spec(link.model_dump() | {spec.field: value}, where="timeline.set.link"))
    if spec.kind is ValueKind.FLAG and spec.control is Knob.SCHEDULER:
        loops = {spec.field: flag(where, value)}
        return _set_loops(state, loops.get("short_term"), loops.get("long_term"), has_scheduler, where)
    return _apply(state, spec, check(spec, where, value))


def apply_command(state: ControlState, command: ControlCommand, *, link: LinkSpec,
                  has_scheduler: bool) -> KnobEffect:
    """One MQTT control message (already parsed by telemetry.schemas.parse_control)."""
    where, value = f"control/{command.knob.value}", command.value
    if command.knob is Knob.LINK:
        return link_effect(of_type(where, value, LinkChange).apply_to(link))
    if command.knob is Knob.SCHEDULER:
        change = of_type(where, value, SchedulerChange)
        return _set_loops(state, change.short_term, change.long_term, has_scheduler, where)
    spec = next(k for k in REGISTRY if k.control is command.knob)
    return _apply(state, spec, check(spec, where, value))


def timeline_event(command: ControlCommand, at_s: float) -> dict[str, Any] | None:
    """The timeline event that replays an applied control message at `at_s`, as a scenario file
    writes it (a dashboard run saved as a scenario replays its operator's knobs); None for pause
    and resume, which no timeline event carries."""
    value, moment = command.value, round(at_s, 3)
    if isinstance(value, LinkChange):
        return {"at_s": moment, "link": dict(value.changes)}
    if isinstance(value, SchedulerChange):
        flags = {"short_term": value.short_term, "long_term": value.long_term}
        settings = {f"scheduler.{name}.enabled": on for name, on in flags.items() if on is not None}
        return {"at_s": moment, "set": settings} if settings else None
    spec = next(k for k in REGISTRY if k.control is command.knob)
    return None if spec.path is None else {"at_s": moment, "set": {spec.path: value}}


def check(spec: KnobSpec, where: str, value: object) -> Any:
    """The value as the knob's type, within its bounds, or AUTO where the knob allows it; a link
    field is left to the link's own schema (None). ScenarioError names where, the value and the fix."""
    kind = spec.kind
    if kind is ValueKind.TOKENS:
        if spec.allows_auto and value == AUTO:
            return AUTO
        return whole(where, value, int(spec.high))
    if kind is ValueKind.COUNT:
        return whole(where, value, int(spec.high))
    if kind is ValueKind.RATE:
        return rate(where, value, spec.low, spec.high)
    if kind is ValueKind.FLAG:
        return flag(where, value)
    if kind is ValueKind.POLICY:
        return policy(where, value)
    if kind is ValueKind.AFFINITY:
        return affinity(where, value)
    return None


def _apply(state: ControlState, spec: KnobSpec, value: Any) -> KnobEffect:
    """The effect of a checked value: the control state written, or the engine's action."""
    if spec.control is Knob.THRESHOLD:
        tokens = state.auto_threshold if value == AUTO else value  # auto: the optimizer's t again
        state.set_threshold(tokens)
        return KnobEffect(f"threshold -> {tokens} tokens")
    if spec.control is Knob.POLICY:
        state.set_policy(value)
        return KnobEffect(f"router policy -> {value.value}")
    if spec.control is Knob.AFFINITY:
        state.set_affinity(value)
        return KnobEffect(f"affinity -> {value.value}")
    if spec.control is Knob.ARRIVAL_RATE:
        return KnobEffect(f"arrival rate -> {value:g}/s", SetRate(value))
    if spec.control is Knob.PAUSE:
        return KnobEffect("arrivals paused", Pause(resume=False))
    if spec.control is Knob.RESUME:
        return KnobEffect("arrivals resumed", Pause(resume=True))
    state.set_split_target(value)  # clusters.local.prefill_instances: the engine words the flips
    return KnobEffect(f"local prefill instances -> {value}", SetSplit(value))


def _set_loops(state: ControlState, short_term: bool | None, long_term: bool | None,
               has_scheduler: bool, where: str) -> KnobEffect:
    """Turning a loop on where the scenario runs no scheduler is refused (it would change nothing,
    and an operator must see that it did not); turning one off there is what already holds."""
    if not has_scheduler:
        if short_term or long_term:
            raise ScenarioError(f"{where}: this scenario runs no scheduler, so no loop can be turned on; "
                                "start a scenario with a scheduler: block")
        return KnobEffect("scheduler: not running in this scenario (both loops stay off)")
    state.set_loops(short_term, long_term)
    return KnobEffect(f"scheduler short-term {'on' if state.short_term_enabled else 'off'}, "
                      f"long-term {'on' if state.long_term_enabled else 'off'}")


def link_change(link: LinkSpec, changes: dict[str, Any]) -> KnobEffect:
    """A timeline `link:` event: its fields merged onto the current link and checked as one."""
    return link_effect(parse_link_spec(link.model_dump() | changes, where="timeline.link"))


def link_effect(spec: LinkSpec) -> KnobEffect:
    """A link change in words, and the reshaping the engine performs."""
    shaped = "unshaped" if spec.bandwidth_mbit is None else f"{spec.bandwidth_mbit:g} Mbit/s"
    return KnobEffect(f"link -> {shaped}, {spec.delay_ms:g} ms, {spec.loss_pct:g} % loss", SetLink(spec))


# --- the schema's promises, checked again at the lever (values are never converted here) ---------


def whole(where: str, value: object, high: int) -> int:
    if type(value) is not int or not 0 <= value <= high:
        raise ScenarioError(f"{where}: {shown(value)} is not a whole number in [0, {high}]; "
                            "give one in that range")
    return value


def rate(where: str, value: object, low: float = MIN_RATE_PER_S, high: float = MAX_RATE_PER_S) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) \
            or not low <= value <= high:  # NaN fails the comparison too
        raise ScenarioError(f"{where}: {shown(value)} is not a rate in [{low:g}, {high:g}] "
                            "per second; give one in that range")
    return float(value)


def flag(where: str, value: object) -> bool:
    if type(value) is not bool:
        raise ScenarioError(f"{where}: {shown(value)} is not true or false; give one of them")
    return value


def policy(where: str, value: object) -> RoutePolicy:
    if not isinstance(value, str) or value not in POLICIES:
        raise ScenarioError(f"{where}: {shown(value)} is not a routing policy; use one of "
                            f"{', '.join(POLICIES)}")
    return RoutePolicy(value)


def affinity(where: str, value: object) -> Affinity:
    if not isinstance(value, str) or value not in AFFINITIES:
        raise ScenarioError(f"{where}: {shown(value)} is not an affinity; use one of {', '.join(AFFINITIES)}")
    return Affinity(value)


def of_type(where: str, value: object, kind: type[T]) -> T:
    if not isinstance(value, kind):
        raise ScenarioError(f"{where}: {shown(value)} is not a {kind.__name__}; send the message "
                            "through telemetry.schemas.parse_control")
    return value


def shown(value: object) -> str:
    """A value from outside, short: a huge number by its size, anything else clipped."""
    if type(value) is int and abs(value) > 10**18:
        return f"a number of about {int(value.bit_length() * math.log10(2)) + 1} digits"
    text = repr(value) if not isinstance(value, float) or math.isfinite(value) else str(value)
    return text if len(text) <= 60 else text[:57] + "..."
