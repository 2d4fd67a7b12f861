"""The cross-datacenter link as a fluid: transfers share the bandwidth max-min fairly (recomputed at
every start, finish, production end and link change), delivery adds the propagation delay, and a
lossy link caps each transfer at the Mathis goodput of its TCP connections. No packets, queues or
slow start: a transfer's rate jumps to its fair share at once. A cut link (100 % loss) carries
nothing: its transfers wait at rate 0 until the link changes (or the run's end fails them).
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
_INF = math.inf


def mathis_bytes_per_s(mss_bytes: float, rtt_s: float, loss: float) -> float:
    """Steady-state goodput of one loss-limited TCP connection: MSS / RTT * C / sqrt(p); 0 on a cut
    link (p = 1: no packet gets through, whatever the formula says)."""
    if loss <= 0:
        return math.inf
    if loss >= 1:
        return 0.0
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
        """The loss-limited ceiling of one transfer (inf on a lossless link, 0 on a cut one)."""
        return self.connections * mathis_bytes_per_s(MSS_BYTES, self.rtt_s, self.loss)


class Transfer:
    """One KV cache (or cached prefix) on its way; mutable state of the fluid model. `remaining`
    is as of `since_s`: the bytes left now are remaining - rate * (now - since_s)."""

    __slots__ = ("num_bytes", "remaining", "since_s", "rate", "produce_cap", "on_done", "arg",
                 "start_s", "is_active", "version")

    def __init__(self, num_bytes: float, produce_cap: float, on_done: Callable[[Any], None],
                 arg: Any, start_s: float) -> None:
        self.num_bytes = num_bytes
        self.remaining = num_bytes
        self.since_s = start_s
        self.rate = 0.0
        self.produce_cap = produce_cap
        self.on_done = on_done
        self.arg = arg
        self.start_s = start_s
        self.is_active = True
        self.version = 0  # grows at every rate change: an older finish timer is stale

    def left_at(self, now_s: float) -> float:
        return self.remaining - self.rate * (now_s - self.since_s) if now_s > self.since_s else self.remaining


class FluidLink:
    """Max-min fair sharing among the active transfers (water-filling over their caps).

    Invariants between events: each active transfer's `rate` is its current share, and the finish
    timer of its latest `version` is armed for since_s + remaining / rate. A start, finish or
    change recomputes every share but touches only the transfers whose share moved, so a transfer
    that keeps its rate keeps its timer: on a wide link most pipelined transfers sit at their
    production cap, and a neighbour's start or end leaves them alone.

    Pipelining: a transfer started with `produce_s` is capped at the rate its prefill produces all
    but the last layer (bytes * (1 - tail) / produce_s) until `end_production`, so it ends at
    max(prefill end + tail / share, start + bytes / share) when the share is steady. A transfer
    held back by a small share during the prefill does not catch up faster than production before
    the prefill ends (an approximation; the live sender can).
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
        self._total_rate = 0.0
        self._last_s = sim.now

    # ---- what entities call ----

    def start(self, num_bytes: float, on_done: Callable[[Any], None], arg: Any,
              produce_s: float = 0.0, tail_fraction: float = 0.0) -> Transfer:
        """Begin sending; `on_done(arg)` runs when the last byte has arrived (after the delay)."""
        self._advance()
        cap = num_bytes * (1.0 - tail_fraction) / produce_s if produce_s > 0 else _INF
        transfer = Transfer(float(num_bytes), cap, on_done, arg, self.sim.now)
        self.active.append(transfer)
        self._reshare()
        return transfer

    def end_production(self, transfer: Transfer) -> None:
        """The prefill behind `transfer` ended: all its bytes may go now."""
        if transfer.is_active and transfer.produce_cap != _INF:
            self._advance()
            transfer.produce_cap = _INF
            self._reshare()

    def cancel(self, transfer: Transfer) -> None:
        """Drop a transfer whose sender or receiver is gone; its bytes so far stay counted as sent.
        A transfer this link does not carry is ignored, so callers need not know its direction."""
        if transfer.is_active and transfer in self.active:
            self._advance()
            transfer.is_active = False
            self.active.remove(transfer)
            self._reshare()

    def set_state(self, state: LinkState) -> None:
        """A link change (timeline or knob): shares are recomputed from now on."""
        self._advance()
        self.state = state
        self._ceiling = state.per_transfer_cap
        self._reshare()

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
        if dt > 0 and self._total_rate:
            sent = self._total_rate * dt
            self.bytes_sent += sent
            rate = self.state.rate_bytes_per_s
            if rate < _INF:
                self.busy_s += sent / rate
        self._last_s = now

    def _reshare(self) -> None:
        """Share the capacity among the active transfers; re-time those whose rate moved."""
        active = self.active
        rates = self._shares(active)
        sim, now, total = self.sim, self.sim.now, 0.0
        for i in range(len(active)):  # not zip(strict=True): compiled, that is a call through Python
            transfer, rate = active[i], rates[i]
            total += rate
            if rate != transfer.rate:
                transfer.remaining = transfer.left_at(now)
                transfer.since_s, transfer.rate = now, rate
                transfer.version = version = transfer.version + 1
                if rate > 0:
                    left_s = transfer.remaining / rate
                    sim.schedule(now + left_s if left_s > 0 else now, self._on_finish, (transfer, version))
        self._total_rate = total

    def _shares(self, active: list[Transfer]) -> list[float]:
        """Water-filling: the smallest caps are met first; the rest split what is left equally.
        Two shortcuts skip the sort: every cap fits (pipelined transfers on a wide link), or none
        binds (an equal split)."""
        ceiling, left = self._ceiling, self.state.rate_bytes_per_s
        caps: list[float] = []
        total = 0.0  # sum(caps), added as sum adds floats, without a call through Python
        for transfer in active:
            cap = transfer.produce_cap if transfer.produce_cap < ceiling else ceiling
            caps.append(cap)
            total += cap
        if left == _INF or total <= left:  # (inf - inf would be NaN below)
            return [cap if cap < left else left for cap in caps]
        share = left / len(active)
        if min(caps) >= share:
            return [share] * len(active)
        rates = caps[:]
        order = sorted(range(len(active)), key=caps.__getitem__)
        for i, k in enumerate(order):
            share = left / (len(order) - i)
            if caps[k] > share:
                for rest in order[i:]:
                    rates[rest] = share
                break
            left -= caps[k]
        return rates

    def _on_finish(self, event: tuple[Transfer, int]) -> None:
        transfer, version = event
        if version != transfer.version or not transfer.is_active:
            return  # its rate changed since this timer was armed, or it was cancelled
        self._advance()
        sim = self.sim
        transfer.is_active = False
        self.active.remove(transfer)
        self.bytes_sent += transfer.left_at(sim.now)  # the float crumbs of the integral
        transfer.remaining, transfer.rate = 0.0, 0.0
        self.bytes_delivered += int(transfer.num_bytes)
        self.num_delivered += 1
        sim.schedule(sim.now + self.state.delay_s, transfer.on_done, transfer.arg)
        self._reshare()
