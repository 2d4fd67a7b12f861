"""Transfers replayed on one new FluidLink: when each one's last byte arrives. The link's tests set
these beside closed forms and bench/link_tcp.py beside live transfers; the engine does not use it
(so it is not in the compiled build)."""

from __future__ import annotations

from collections.abc import Sequence

from emulator.virtual.core import Simulator
from emulator.virtual.costs import layer_sends
from emulator.virtual.link import FluidLink, LinkState


def arrival_times(state: LinkState, transfers: Sequence[tuple[float, float]]) -> list[float]:
    """For each (start_s, bytes), the simulated moment its last byte arrives on a link of `state`
    that carries only these transfers, started at their moments."""
    sim, done = Simulator(), {}
    link = FluidLink(sim, state)

    def start(k: int) -> None:
        link.start(transfers[k][1], lambda j: done.__setitem__(j, sim.now), k)

    for i, (at_s, _) in enumerate(transfers):
        sim.schedule(at_s, start, i)
    sim.run()
    return [done[i] for i in range(len(transfers))]


def pipelined_seconds(state: LinkState, num_bytes: float, produce_s: float, shares: tuple[float, ...]) -> float:
    """Seconds from the prefill's start until the last byte of one cache arrives on a new link of
    `state`, its layers (`shares` of the bytes, in order) produced over `produce_s`, the last at its end."""
    sim, done = Simulator(), []
    link = FluidLink(sim, state)
    transfer = link.start(num_bytes, lambda _: done.append(sim.now), None, layer_sends(shares, produce_s, num_bytes))
    sim.schedule(produce_s, lambda _: link.end_production(transfer))
    sim.run()
    return done[0]
