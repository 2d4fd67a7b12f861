"""Knob changes on a running system, from the scenario's timeline or from MQTT control messages.

Both arrive already validated (scenario schema, telemetry.schemas.parse_control); this module maps
each onto the object that owns it and says in words what it did. It still takes a value only when
it has the type and bounds the schema promises, so nothing is converted with int()/float() here.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from emulator.control.router import Router
from emulator.control.scheduler import DualTimescaleScheduler
from emulator.control.types import RoutePolicy
from emulator.errors import ScenarioError
from emulator.limits import MAX_INSTANCES, MAX_RATE_PER_S, MAX_TOKENS
from emulator.live.pacing import WorkloadClock
from emulator.net.spec import LinkSpec, parse_link_spec
from emulator.telemetry.schemas import ControlCommand, Knob, LinkChange, SchedulerChange

LINK_PREFIX = "link."
T = TypeVar("T")


class Knobs:
    """The levers an operator holds. `update_link` reshapes the real link; `set_prefill_instances`
    asks for role flips toward a local split."""

    def __init__(self, router: Router, scheduler: DualTimescaleScheduler | None, clock: WorkloadClock,
                 link: Callable[[], LinkSpec], update_link: Callable[[LinkSpec], Awaitable[None]],
                 set_prefill_instances: Callable[[int], Awaitable[str]]) -> None:
        self.router, self.scheduler, self.clock = router, scheduler, clock
        self.link, self.update_link = link, update_link
        self.set_prefill_instances = set_prefill_instances

    async def apply_command(self, command: ControlCommand) -> str:
        """One MQTT control message; returns what changed, in words."""
        knob, value, where = command.knob, command.value, f"control/{command.knob.value}"
        if knob is Knob.THRESHOLD:
            return self.set_threshold(whole(where, value, MAX_TOKENS))
        if knob is Knob.POLICY:
            return self.set_policy(policy(where, value))
        if knob is Knob.CACHE_AFFINITY:
            return self.set_cache_affinity(flag(where, value))
        if knob is Knob.SCHEDULER:
            change = of_type(where, value, SchedulerChange)
            return self.set_scheduler(change.short_term, change.long_term)
        if knob is Knob.LINK:
            return await self.set_link(of_type(where, value, LinkChange).apply_to(self.link()))
        if knob is Knob.ARRIVAL_RATE:
            return self.set_rate(rate(where, value))
        if knob is Knob.PAUSE:
            self.clock.pause()
            return "arrivals paused"
        self.clock.resume()
        return "arrivals resumed"

    async def apply_setting(self, path: str, value: Any) -> str:
        """One `set:` entry of the scenario timeline (paths of emulator.scenario_overrides.KNOBS)."""
        where = f"timeline.set.{path}"
        if path == "router.threshold_tokens":
            if value == "auto":
                raise ScenarioError(f"{where}: auto is chosen at start only in a live run; "
                                    "give a whole number of tokens")
            return self.set_threshold(whole(where, value, MAX_TOKENS))
        if path == "router.policy":
            return self.set_policy(policy(where, value))
        if path == "router.cache_affinity":
            return self.set_cache_affinity(flag(where, value))
        if path == "scheduler.short_term.enabled":
            return self.set_scheduler(flag(where, value), None)
        if path == "scheduler.long_term.enabled":
            return self.set_scheduler(None, flag(where, value))
        if path == "workload.arrival.rate_per_s":
            return self.set_rate(rate(where, value))
        if path == "clusters.local.prefill_instances":
            return await self.set_prefill_instances(whole(where, value, MAX_INSTANCES))
        if path.startswith(LINK_PREFIX):
            field = path[len(LINK_PREFIX):]
            return await self.set_link(parse_link_spec(self.link().model_dump() | {field: value},
                                                 where="timeline.set.link"))
        raise ScenarioError(f"timeline.set: {shown(path)} is not a knob the live engine can turn")

    def set_threshold(self, tokens: int) -> str:
        self.router.set_threshold(tokens)
        if self.scheduler is not None:
            self.scheduler.set_threshold(tokens)
        return f"threshold -> {tokens} tokens"

    def set_policy(self, route_policy: RoutePolicy) -> str:
        self.router.set_policy(route_policy)
        return f"router policy -> {route_policy.value}"

    def set_cache_affinity(self, enabled: bool) -> str:
        self.router.set_cache_affinity(enabled)
        return f"cache affinity -> {enabled}"

    def set_rate(self, rate_per_s: float) -> str:
        self.clock.set_rate(rate_per_s)
        return f"arrival rate -> {rate_per_s:g}/s"

    def set_scheduler(self, short_term: bool | None, long_term: bool | None) -> str:
        if self.scheduler is None:
            return "scheduler: not running in this scenario"
        self.scheduler.set_enabled(short_term, long_term)
        cfg = self.scheduler.config
        return f"scheduler short-term {'on' if cfg.short_term_enabled else 'off'}, " \
               f"long-term {'on' if cfg.long_term_enabled else 'off'}"

    async def set_link(self, spec: LinkSpec) -> str:
        await self.update_link(spec)
        rate = "unshaped" if spec.bandwidth_mbit is None else f"{spec.bandwidth_mbit:g} Mbit/s"
        return f"link -> {rate}, {spec.delay_ms:g} ms, {spec.loss_pct:g} % loss"


# --- what the schema promises, checked again at the lever (values are never converted here) -----


def whole(where: str, value: object, high: int) -> int:
    if type(value) is not int or not 0 <= value <= high:
        raise ScenarioError(f"{where}: {shown(value)} is not a whole number in [0, {high}]; "
                            "give one in that range")
    return value


def rate(where: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) \
            or not 0 < value <= MAX_RATE_PER_S:  # NaN fails the comparison too
        raise ScenarioError(f"{where}: {shown(value)} is not a rate in (0, {MAX_RATE_PER_S:g}] "
                            "per second; give one in that range")
    return float(value)


def flag(where: str, value: object) -> bool:
    if type(value) is not bool:
        raise ScenarioError(f"{where}: {shown(value)} is not true or false; give one of them")
    return value


def policy(where: str, value: object) -> RoutePolicy:
    choices = [p.value for p in RoutePolicy]
    if not isinstance(value, str) or value not in choices:
        raise ScenarioError(f"{where}: {shown(value)} is not a routing policy; use one of "
                            f"{', '.join(choices)}")
    return RoutePolicy(value)


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
