"""The knobs as a live run stands, for every metrics snapshot: the Live page's widgets follow them.
(The knobs themselves are the registry's, emulator.knobs; the run core turns them into actions,
emulator.run.steering, and the live loops carry those out.)"""

from __future__ import annotations

from emulator.control.control_state import ControlState
from emulator.live.pacing import WorkloadClock
from emulator.telemetry.schemas import KnobState


def knob_state(state: ControlState, has_scheduler: bool, clock: WorkloadClock) -> KnobState:
    router = state.router
    return KnobState(policy=router.policy.value, affinity=router.affinity.value, has_scheduler=has_scheduler,
                     short_term=state.short_term_enabled, long_term=state.long_term_enabled,
                     rate_per_s=(clock.base_rate_per_s or 1.0) * clock.speed, is_paused=clock.is_paused)
