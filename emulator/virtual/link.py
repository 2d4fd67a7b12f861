"""The cross-datacenter link as a fluid: transfers share the bandwidth max-min fairly (recomputed at
every start, finish, production end and link change), delivery adds the propagation delay, and a
lossy link caps each transfer at the Mathis goodput of its TCP connections. No packets, queues or
slow start: a transfer's rate jumps to its fair share at once.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from emulator.virtual.core import Simulator

MSS_BYTES = 1448  # a 1500-byte Ethernet MTU less IP and TCP headers (with timestamps)
MATHIS_C = math.sqrt(1.5)  # ~1.22: Mathis et al. 1997, periodic loss, no delayed ACKs
CONNECTIONS = 4  # TCP connections per KV transfer, as emulator.transport's sender opens
MIN_RTT_S = 1e-4  # a LAN-like floor, so a lossy link with no added delay still has a finite ceiling
DONE_WITHIN_S = 1e-9  # a transfer this close to its end counts as done (float rounding of times)
_INF = math.inf


def mathis_bytes_per_s(mss_bytes: float, rtt_s: float, loss: float) -> float:
    """Steady-state goodput of one loss-limited TCP connection: MSS / RTT * C / sqrt(p)."""
    if loss <= 0:
        return math.inf
    return mss_bytes / max(rtt_s, MIN_RTT_S) * MATHIS_C / math.sqrt(loss)


@dataclass(frozen=True, slots=True)
class LinkState:
    """One direction of the link as the fluid model sees it; rate inf means unshaped."""

    rate_bytes_per_s: float
    delay_s: float
    loss: float = 0.0  # packet loss probability, 0..1
    rtt_s: float = 0.0  # both directions' delays: what the sender's ACK clock sees
    connections: int = CONNECTIONS

    @property
    def per_transfer_cap(self) -> float:
        """The loss-limited ceiling of one transfer (inf on a lossless link)."""
        return self.connections * mathis_bytes_per_s(MSS_BYTES, self.rtt_s, self.loss)


class Transfer:
    """One KV cache (or cached prefix) on its way; mutable state of the fluid model."""

    __slots__ = ("num_bytes", "remaining", "rate", "produce_cap", "on_done", "arg", "start_s",
                 "is_active")

    def __init__(self, num_bytes: float, produce_cap: float, on_done: Callable[[Any], None],
                 arg: Any, start_s: float) -> None:
        self.num_bytes = num_bytes
        self.remaining = num_bytes
        self.rate = 0.0
        self.produce_cap = produce_cap
        self.on_done = on_done
        self.arg = arg
        self.start_s = start_s
        self.is_active = True


class FluidLink:
    """Max-min fair sharing among the active transfers (water-filling over their caps).

    Invariants between events: every active transfer's `remaining` is its bytes left as of
    `_last_s`, and its `rate` is its current share; one timer (the latest `_gen`) is armed for the
    earliest finish. Pipelining: a transfer started with `produce_s` is capped at the rate its
    prefill produces all but the last layer (bytes * (1 - tail) / produce_s) until
    `end_production`, so it ends at max(prefill end + tail / share, start + bytes / share) when
    the share is steady. A transfer held back by a small share during the prefill does not catch up
    faster than production before the prefill ends (an approximation; the live sender can).
    """

    def __init__(self, sim: Simulator, state: LinkState) -> None:
        self.sim = sim
        self.state = state
        self._ceiling = state.per_transfer_cap  # the state's, kept: it is read at every share
        self.active: list[Transfer] = []
        self.bytes_sent = 0.0  # fluid integral of every rate, cancelled transfers included
        self.bytes_delivered = 0  # whole caches delivered (sum of their sizes)
        self.busy_s = 0.0  # integral of (sum of rates / capacity): seconds of full use
        self.num_delivered = 0
        self._last_s = sim.now
        self._gen = 0

    # ---- what entities call ----

    def start(self, num_bytes: float, on_done: Callable[[Any], None], arg: Any,
              produce_s: float = 0.0, tail_fraction: float = 0.0) -> Transfer:
        """Begin sending; `on_done(arg)` runs when the last byte has arrived (after the delay)."""
        self._advance()
        cap = num_bytes * (1.0 - tail_fraction) / produce_s if produce_s > 0 else math.inf
        transfer = Transfer(float(num_bytes), cap, on_done, arg, self.sim.now)
        self.active.append(transfer)
        self._settle()
        return transfer

    def end_production(self, transfer: Transfer) -> None:
        """The prefill behind `transfer` ended: all its bytes may go now."""
        if transfer.is_active and transfer.produce_cap != _INF:
            self._advance()
            transfer.produce_cap = math.inf
            self._settle()

    def cancel(self, transfer: Transfer) -> None:
        """Drop a transfer whose sender or receiver is gone; its bytes so far stay counted as sent.
        A transfer this link does not carry is ignored, so callers need not know its direction."""
        if transfer.is_active and transfer in self.active:
            self._advance()
            transfer.is_active = False
            self.active.remove(transfer)
            self._settle()

    def set_state(self, state: LinkState) -> None:
        """A link change (timeline or knob): shares are recomputed from now on."""
        self._advance()
        self.state = state
        self._ceiling = state.per_transfer_cap
        self._settle()

    def sync(self) -> None:
        """Bring the byte counters up to now (a sampler reads them between events)."""
        self._advance()

    @property
    def num_active(self) -> int:
        return len(self.active)

    # ---- the fluid ----

    def _advance(self) -> None:
        now = self.sim.now
        dt = now - self._last_s
        if dt > 0 and self.active:
            total = 0.0
            for transfer in self.active:
                sent = transfer.rate * dt
                transfer.remaining -= sent
                total += sent
            self.bytes_sent += total
            rate = self.state.rate_bytes_per_s
            if rate < _INF:
                self.busy_s += total / rate
        self._last_s = now

    def _settle(self) -> None:
        """Finish what is done, share the capacity among the rest and arm the next finish."""
        active = self.active
        if active:
            finished = [t for t in active if t.remaining <= t.rate * DONE_WITHIN_S + 1e-6]
            for transfer in finished:
                self._deliver(transfer)
            if active:
                self._share(active)
        self._arm()

    def _deliver(self, transfer: Transfer) -> None:
        transfer.is_active = False
        self.active.remove(transfer)
        self.bytes_sent += transfer.remaining  # the float crumbs of the integral
        transfer.remaining = 0.0
        self.bytes_delivered += int(transfer.num_bytes)
        self.num_delivered += 1
        self.sim.schedule(self.sim.now + self.state.delay_s, transfer.on_done, transfer.arg)

    def _share(self, active: list[Transfer]) -> None:
        """Water-filling: the smallest caps are met first; the rest split what is left equally.
        Two shortcuts skip the sort: every cap fits (pipelined transfers on a wide link), or none
        binds (an equal split)."""
        ceiling, left = self._ceiling, self.state.rate_bytes_per_s
        caps = [t.produce_cap if t.produce_cap < ceiling else ceiling for t in active]
        if left == _INF or sum(caps) <= left:  # (inf - inf would be NaN below)
            for transfer, cap in zip(active, caps, strict=False):
                transfer.rate = cap if cap < left else left
            return
        share = left / len(active)
        if min(caps) >= share:
            for transfer in active:
                transfer.rate = share
            return
        order = sorted(range(len(active)), key=caps.__getitem__)
        for i, k in enumerate(order):
            share = left / (len(order) - i)
            if caps[k] <= share:
                active[k].rate = caps[k]
                left -= caps[k]
            else:
                for rest in order[i:]:
                    active[rest].rate = share
                return

    def _arm(self) -> None:
        self._gen = gen = self._gen + 1
        soonest = _INF
        for transfer in self.active:
            rate = transfer.rate
            if rate > 0:
                left_s = transfer.remaining / rate
                if left_s < soonest:  # min(soonest, left_s), without the call
                    soonest = left_s
        if soonest < _INF:
            sim = self.sim
            sim.schedule(sim.now + (0.0 if 0.0 > soonest else soonest), self._on_timer, gen)

    def _on_timer(self, gen: int) -> None:
        if gen != self._gen:
            return  # superseded by a later start, finish or change
        self._advance()
        self._settle()
