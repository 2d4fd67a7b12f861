"""Knob changes on a running system, from the scenario's timeline or from MQTT control messages.

Both arrive already validated (scenario schema, telemetry.schemas.parse_control); this module only
maps each onto the object that owns it and says in words what it did.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from emulator.control.router import Router
from emulator.control.scheduler import DualTimescaleScheduler
from emulator.control.types import RoutePolicy
from emulator.errors import ScenarioError
from emulator.live.pacing import WorkloadClock
from emulator.net.spec import LinkSpec, parse_link_spec
from emulator.telemetry.schemas import ControlCommand, Knob, LinkChange, SchedulerChange

LINK_PREFIX = "link."


class Knobs:
    """The levers an operator holds. `update_link` reshapes the real link; `set_prefill_instances`
    asks for role flips toward a local split."""

    def __init__(self, router: Router, scheduler: DualTimescaleScheduler | None, clock: WorkloadClock,
                 link: Callable[[], LinkSpec], update_link: Callable[[LinkSpec], None],
                 set_prefill_instances: Callable[[int], Awaitable[str]]) -> None:
        self.router, self.scheduler, self.clock = router, scheduler, clock
        self.link, self.update_link = link, update_link
        self.set_prefill_instances = set_prefill_instances

    async def apply_command(self, command: ControlCommand) -> str:
        """One MQTT control message; returns what changed, in words."""
        knob, value = command.knob, command.value
        if knob is Knob.THRESHOLD:
            return self.set_threshold(int(value))
        if knob is Knob.POLICY:
            self.router.set_policy(RoutePolicy(value))
            return f"router policy -> {value}"
        if knob is Knob.CACHE_AFFINITY:
            self.router.set_cache_affinity(bool(value))
            return f"cache affinity -> {value}"
        if knob is Knob.SCHEDULER:
            assert isinstance(value, SchedulerChange)
            return self.set_scheduler(value.short_term, value.long_term)
        if knob is Knob.LINK:
            assert isinstance(value, LinkChange)
            return self.set_link(value.apply_to(self.link()))
        if knob is Knob.ARRIVAL_RATE:
            self.clock.set_rate(float(value))
            return f"arrival rate -> {float(value):g}/s"
        if knob is Knob.PAUSE:
            self.clock.pause()
            return "arrivals paused"
        self.clock.resume()
        return "arrivals resumed"

    async def apply_setting(self, path: str, value: Any) -> str:
        """One `set:` entry of the scenario timeline (paths of emulator.scenario_overrides.KNOBS)."""
        if path == "router.threshold_tokens":
            return self.set_threshold(int(value))
        if path == "router.policy":
            self.router.set_policy(RoutePolicy(value))
            return f"router policy -> {value}"
        if path == "router.cache_affinity":
            self.router.set_cache_affinity(bool(value))
            return f"cache affinity -> {value}"
        if path == "scheduler.short_term.enabled":
            return self.set_scheduler(bool(value), None)
        if path == "scheduler.long_term.enabled":
            return self.set_scheduler(None, bool(value))
        if path == "workload.arrival.rate_per_s":
            self.clock.set_rate(float(value))
            return f"arrival rate -> {float(value):g}/s"
        if path == "clusters.local.prefill_instances":
            return await self.set_prefill_instances(int(value))
        if path.startswith(LINK_PREFIX):
            field = path[len(LINK_PREFIX):]
            return self.set_link(parse_link_spec(self.link().model_dump() | {field: value}))
        raise ScenarioError(f"timeline.set: {path!r} is not a knob the live engine can turn")

    def set_threshold(self, tokens: int) -> str:
        self.router.set_threshold(tokens)
        if self.scheduler is not None:
            self.scheduler.set_threshold(tokens)
        return f"threshold -> {tokens} tokens"

    def set_scheduler(self, short_term: bool | None, long_term: bool | None) -> str:
        if self.scheduler is None:
            return "scheduler: not running in this scenario"
        self.scheduler.set_enabled(short_term, long_term)
        cfg = self.scheduler.config
        return f"scheduler short-term {'on' if cfg.short_term_enabled else 'off'}, " \
               f"long-term {'on' if cfg.long_term_enabled else 'off'}"

    def set_link(self, spec: LinkSpec) -> str:
        self.update_link(spec)
        rate = "unshaped" if spec.bandwidth_mbit is None else f"{spec.bandwidth_mbit:g} Mbit/s"
        return f"link -> {rate}, {spec.delay_ms:g} ms, {spec.loss_pct:g} % loss"
