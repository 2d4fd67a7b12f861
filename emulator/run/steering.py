"""What steers a run besides its requests, turned into the run core's actions once for both
engines: a knob (a control message, or a timeline `set:`), the timeline's link changes, kills and
restarts, and the scheduler's ticks. Each answer ends with a Note in the run's words; the engine
carries the actions out (reshape its link, re-pace its arrivals, kill a node) in order.
"""

from __future__ import annotations

from emulator import knobs as registry
from emulator.control.scheduler import RoleChange
from emulator.errors import PrfaasError
from emulator.knobs import KnobEffect, Pause, SetLink, SetRate, SetSplit
from emulator.net.spec import LinkSpec
from emulator.run import feed, timeline
from emulator.run.core import RunCore
from emulator.run.feed import Interval
from emulator.run.protocol import (
    NOTHING,
    Action,
    Actions,
    KillNode,
    Note,
    PauseArrivals,
    ReshapeLink,
    RestartNode,
    SetArrivalRate,
)
from emulator.run.timeline import NodeAction
from emulator.scenario.parts import TimelineEvent
from emulator.telemetry.control_messages import ControlCommand

NO_PAUSE = ("pause/resume: a virtual run has no wall clock to hold; shape arrivals with workload.arrival "
            "or a timeline burst")


class Steering:
    """The run's knobs, timeline and scheduler over one RunCore. `link` is the link as the run
    last asked for it (a change threads through a `set:` of several knobs); `can_pause`: the
    engine has a wall clock to hold (the live one)."""

    def __init__(self, core: RunCore, link: LinkSpec, *, can_pause: bool) -> None:
        self.core, self.link, self.can_pause = core, link, can_pause

    @property
    def has_scheduler(self) -> bool:
        return self.core.scheduler is not None

    def timeline(self, event: TimelineEvent) -> Actions:
        """One timeline event: its steps, then a Note of what it did and what it refused."""
        core = self.core
        plan = timeline.interpret(event, core.state, self.link, has_scheduler=self.has_scheduler)
        acts: list[Action] = []
        done, refused = [], plan.refused
        try:
            for step in plan.steps:
                if isinstance(step, NodeAction):
                    slot = core.board.slot_of(step.node)
                    acts.append(KillNode(slot) if step.kill else RestartNode(slot))
                    done.append(f"{'kill' if step.kill else 'restart'} {core.board.names[slot]}")
                else:
                    done.append(self._effect(step, acts))
        except PrfaasError as err:  # a refused knob is noted, the run goes on
            refused = str(err)
        core.refresh_feed()  # a loop switched off stops the scheduler's feed too
        acts.append(Note("timeline", timeline.words(done, refused), refused is not None))
        return acts

    def command(self, command: ControlCommand) -> Actions:
        """One control message (the live engine's MQTT control topic)."""
        acts: list[Action] = []
        try:
            what = self._effect(registry.apply_command(
                self.core.state, command, link=self.link, has_scheduler=self.has_scheduler), acts)
            refused = False
        except PrfaasError as err:
            what, refused = f"refused {command.knob.value}: {err}", True
        self.core.refresh_feed()
        acts.append(Note("control", what, refused))
        return acts

    def _effect(self, effect: KnobEffect, acts: list[Action]) -> str:
        """What a knob asks outside the control state, as actions; returns its words."""
        action = effect.action
        if isinstance(action, SetLink):
            self.link = action.spec
            acts.append(ReshapeLink(action.spec))
        elif isinstance(action, SetRate):
            acts.append(SetArrivalRate(action.rate_per_s))
        elif isinstance(action, Pause):
            if not self.can_pause:
                raise PrfaasError(NO_PAUSE)
            acts.append(PauseArrivals(action.resume))
        elif isinstance(action, SetSplit):
            words, flips = self.core.set_split(action.num_prefill)
            acts.extend(flips)
            return words
        return effect.words

    def tick(self, t: float, interval: Interval) -> Actions:
        """One interval's observations to the scheduler, then whatever loop is due: a threshold
        change is in the control state already; a role change drains its node (StartFlip once idle)."""
        core = self.core
        scheduler = core.fed
        if scheduler is None:
            return NOTHING
        acts: list[Action] = []
        for decision in feed.tick(scheduler, t, interval):
            if isinstance(decision, RoleChange):
                slot = core.board.slot_of(decision.node)
                if slot >= 0:
                    acts.extend(core.request_flip(slot, decision.to_role))
            acts.append(Note("scheduler", decision.reason))
        return acts
