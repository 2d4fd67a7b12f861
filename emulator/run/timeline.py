"""The scenario timeline, interpreted once for both engines: each event becomes the knob effects
and node actions an engine carries out, in order, with the words both engines note.

Pure: the knobs write the run's ControlState as they are read (emulator.knobs); what lies
outside the control plane (the link, the arrival clock, the split, a node's process) comes back as
steps. A `set:` of several knobs threads the link through them, so a later entry sees the link an
earlier one set. Bursts are part of the built arrivals and interpret to nothing.
"""

from __future__ import annotations

from dataclasses import dataclass

from emulator import knobs as registry
from emulator.control.control_state import ControlState
from emulator.control.types import NodeId
from emulator.errors import PrfaasError
from emulator.knobs import KnobEffect, SetLink
from emulator.net.spec import LinkSpec
from emulator.scenario.parts import TimelineEvent


@dataclass(frozen=True, slots=True)
class NodeAction:
    """Kill (`kill=True`) or restart the node `node` (its slot, whatever its role now)."""

    node: NodeId
    kill: bool


Step = KnobEffect | NodeAction


@dataclass(frozen=True, slots=True)
class Interpreted:
    """An event's steps, and why the rest of it was refused (None: nothing was)."""

    steps: list[Step]
    refused: str | None = None


def interpret(event: TimelineEvent, state: ControlState, link: LinkSpec, *, has_scheduler: bool) -> Interpreted:
    """The steps of one timeline event; a refused entry stops the event there (the entries before
    it stand, as the control state already holds them)."""
    steps: list[Step] = []
    try:
        if event.link is not None:
            steps.append(registry.link_change(link, event.link))
        elif event.set is not None:
            for path, value in event.set.items():
                effect = registry.apply_setting(state, path, value, link=link, has_scheduler=has_scheduler)
                if isinstance(effect.action, SetLink):
                    link = effect.action.spec
                steps.append(effect)
        elif event.node_id is not None:
            steps.append(NodeAction(event.node_id, kill=event.kill is not None))
    except PrfaasError as err:
        return Interpreted(steps, str(err))
    return Interpreted(steps)


def note(now_s: float, source: str, what: str) -> str:
    """A line of the run's knob or decision log, alike on both engines."""
    return f"t={now_s:.1f}s {source}: {what}"


def words(done: list[str], refused: str | None) -> str:
    """What an event did, in one line: each step's words, then what was refused."""
    return "; ".join(done + ([f"refused: {refused}"] if refused is not None else []))
