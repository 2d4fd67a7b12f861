"""The live engine's hands on the knob registry (emulator.run.knobs): the registry checks a value and
writes the control state; this module performs what it asks of the live mechanics (reshape the real
link off the loop, re-pace the wall-clock arrivals, flip local workers).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from emulator.control.router import Router
from emulator.control.scheduler import DualTimescaleScheduler
from emulator.live.pacing import WorkloadClock
from emulator.net.spec import LinkSpec
from emulator.run import knobs as registry
from emulator.run.knobs import KnobEffect, Pause, SetLink, SetRate, SetSplit
from emulator.telemetry.control_messages import ControlCommand
from emulator.telemetry.schemas import KnobState


class Knobs:
    """The levers an operator holds. `update_link` reshapes the real link; `set_prefill_instances`
    asks for role flips toward a local split and words them."""

    def __init__(self, router: Router, scheduler: DualTimescaleScheduler | None, clock: WorkloadClock,
                 link: Callable[[], LinkSpec], update_link: Callable[[LinkSpec], Awaitable[None]],
                 set_prefill_instances: Callable[[int], Awaitable[str]]) -> None:
        self.state, self.has_scheduler, self.clock = router.state, scheduler is not None, clock
        self.link, self.update_link = link, update_link
        self.set_prefill_instances = set_prefill_instances

    async def apply_command(self, command: ControlCommand) -> str:
        """One MQTT control message; returns what changed, in words."""
        return await self.perform(registry.apply_command(
            self.state, command, link=self.link(), has_scheduler=self.has_scheduler))

    async def apply_setting(self, path: str, value: Any) -> str:
        """One `set:` entry of the scenario timeline."""
        return await self.perform(registry.apply_setting(
            self.state, path, value, link=self.link(), has_scheduler=self.has_scheduler))

    async def perform(self, effect: KnobEffect) -> str:
        """Carry out what a knob asks of the live mechanics; returns its words."""
        match effect.action:
            case SetLink(spec=spec):
                await self.update_link(spec)
            case SetRate(rate_per_s=rate):
                self.clock.set_rate(rate)
            case Pause(resume=True):
                self.clock.resume()
            case Pause(resume=False):
                self.clock.pause()
            case SetSplit(num_prefill=num_prefill):
                return await self.set_prefill_instances(num_prefill)
        return effect.words

    def reported(self) -> KnobState:
        """The knobs as they stand, for every metrics snapshot: the Live page's widgets follow them."""
        router, clock = self.state.router, self.clock
        return KnobState(policy=router.policy.value, affinity=router.affinity.value,
                         has_scheduler=self.has_scheduler, short_term=self.state.short_term_enabled,
                         long_term=self.state.long_term_enabled,
                         rate_per_s=(clock.base_rate_per_s or 1.0) * clock.speed, is_paused=clock.is_paused)
