"""The cross-datacenter link as a fluid of TCP transfers: they share the bandwidth by weighted
max-min (recomputed at every start, finish, produced layer, window step and link change), delivery
adds the propagation delay, a lossy link caps each transfer at the loss-limited goodput of its
connections (lower for a cache sent as produced after the link idled past an RTO), caches from
one sender take its connections in the order they started (as many each as it has chunks left, on a
lossless link), new connections ramp up in slow start,
a buffer deeper than the BDP locks newcomers out behind the incumbents, and a backlog the senders'
windows push past it overflows it, the caches behind the loss waiting for its retransmission
(overflow.py; the numbers and their calibration: tcp.py; the link's parameters: link_state.py;
one transfer's state: transfer.py).
No packets: the queue shows as that lockout and as the standing queue the senders' RTT sees
(produced bytes not yet delivered beyond the BDP, its peak kept for the sampler). A cut link
(100 % loss) carries nothing: its transfers wait at rate 0 until the link changes (or the run's
end fails them).
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence
from operator import attrgetter
from typing import Any

from emulator.virtual.core import Simulator
from emulator.virtual.link_state import LinkState
from emulator.virtual.overflow import QueueOverflow
from emulator.virtual.tcp import (
    CHUNK_BYTES,
    CONNECTIONS,
    MSS_BYTES,
    initial_window_bytes,
    is_idle_spell,
    loss_time_cv,
    loss_time_factor,
    mathis_bytes_per_s,
    tail_lanes,
)
from emulator.virtual.transfer import Transfer, sender_lanes
from emulator.virtual.water_fill import max_min, weighted_max_min

__all__ = ["CONNECTIONS", "MSS_BYTES", "FluidLink", "LinkState", "Transfer", "mathis_bytes_per_s"]
_INF = math.inf


class FluidLink:
    """Max-min fair sharing among the active transfers (water-filling over their caps).

    Invariants between events: each active transfer's `rate` is its current share, and the finish
    timer of its latest `version` is armed for since_s + remaining / rate (during slow start, only
    when that falls before the next round). A start, finish, layer or change recomputes every
    share but touches only the transfers whose share moved, so a transfer that keeps its rate
    keeps its timer: on a wide link most pipelined transfers wait for their next layer or sit at
    their loss cap, and a neighbour's start or end leaves them alone. A layer handed to, or sent
    by, the only transfer that can send re-times it alone (`_retime_lone_sender`): no share moves.

    Pipelining: a transfer started with `layers` gets each layer's bytes when its prefill hands
    them over (seconds after the start) and the rest, its last layer, at `end_production`; it
    sends what it holds at its share and waits, taking none, when it has sent it all, as the live
    sender does. So a link slower than the prefill idles while the first, small layers are computed
    (the live workers ship nothing before the first layer ends). Under loss it is carried by all
    the connections while produced and by its last layer's lanes after (tcp.tail_lanes).
    """

    def __init__(self, sim: Simulator, state: LinkState, rng: random.Random | None = None) -> None:
        """`rng` draws each cache's loss-limited rate around the mean at its start (the engine's,
        seeded by the scenario); None keeps every cache at the mean (benches, hand-computed tests)."""
        self.sim = sim
        self.state = state
        self._rng = rng
        self._overflow = QueueOverflow()  # a backlog past the buffer: loss recovery behind it
        self._saturated_s = 0.0  # seconds the link was full since the overflow's last check
        self._piped_ceiling = self._idle_ceiling = 0.0
        self._take_ceilings(state)
        self._idle_since = _INF  # when the last transfer left the link (inf: none has yet; new ones ramp)
        self._window = initial_window_bytes(state.connections) * state.wire_per_byte  # new connections: slow start
        self._window_rate = self._window / state.rtt_s if state.has_ramp else _INF  # inf: open
        self._is_ramp_armed = False
        self._ramp_at = _INF  # when the armed slow-start round runs
        self._num_newcomers = 0  # active transfers with weight < 1
        self._sender_count: dict[int, int] = {}  # active transfers per sender key
        self._num_sharing = 0  # senders with more than one active transfer
        self.active: list[Transfer] = []
        self.bytes_sent = 0.0  # fluid integral of every rate (wire bytes), cancelled transfers included
        self.bytes_delivered = 0  # whole caches delivered (sum of their sizes)
        self.busy_s = 0.0  # integral of (sum of rates / capacity): seconds of full use
        self.num_delivered = 0
        self._total_rate = 0.0
        self._last_s = sim.now
        self.queue_peak_bytes = 0.0  # the most bytes queued beyond the BDP since take_queue_peak
        self.has_sent = False  # whether a transfer was active since take_queue_peak

    def take_queue_peak(self) -> tuple[float, bool]:
        """(peak standing queue, whether anything was sent) since the last call; the next interval
        starts from the queue as it is now."""
        now_queued = self._note_queue()
        peak, sent = self.queue_peak_bytes, self.has_sent
        self.queue_peak_bytes, self.has_sent = now_queued, bool(self.active)
        return peak, sent

    # ---- what entities call ----

    def start(self, num_bytes: float, on_done: Callable[[Any], None], arg: Any,
              layers: Sequence[tuple[float, float, float]] | None = None, sender: int = -1) -> Transfer:
        """Begin sending; `on_done(arg)` runs when the last byte has arrived (after the delay).
        `layers`: the cache is produced as it goes, each (seconds from now, bytes, of them late
        bytes: costs.layer_sends) handed over then and what they leave at `end_production`; None:
        all of it is there now. `sender`: the connections it goes on (a prefill worker's to one
        decode worker), shared with that sender's other caches; -1: connections of its own."""
        self._advance()
        now, wire = self.sim.now, self.state.wire_per_byte
        transfer = Transfer(float(num_bytes), num_bytes * wire, num_bytes * wire if layers is not None else 0.0,
                            on_done, arg, now, float(self.state.connections), sender)
        if self._rng is not None and self.state.loss > 0.0:
            transfer.rate_factor = 1.0 / loss_time_factor(self._rng, loss_time_cv(num_bytes * wire, self.state.loss))
        if layers is not None:
            tail = float(num_bytes)
            for after_s, size, late in layers:
                tail -= size
                self.sim.schedule(now + after_s, self._on_layer, (transfer, size * wire, late * wire))
            transfer.is_pipelined = True
            transfer.tail_lanes = tail_lanes(tail, self.state.connections)
        if not self.active and is_idle_spell(now - self._idle_since, self.state.rtt_s):
            transfer.is_after_idle = transfer.is_pipelined
            self._overflow.window_bytes = self._saturated_s = 0.0  # an idle window shrinks (tcp.py, idle spells)
        rate = self.state.rate_bytes_per_s
        if rate < _INF and self._total_rate >= rate * (1.0 - 1e-9) and self._has_incumbent(now):
            transfer.weight = self.state.newcomer_weight  # the queue is full of incumbents' bytes
            if transfer.weight < 1.0:
                self._num_newcomers += 1
        self.active.append(transfer)
        if sender >= 0:
            count = self._sender_count.get(sender, 0) + 1
            self._sender_count[sender] = count
            if count == 2:
                self._num_sharing += 1
        self._reshare()
        return transfer

    def end_production(self, transfer: Transfer) -> None:
        """The prefill behind `transfer` ended: its last layer (and any layer not yet handed over)
        may go now, on its last layer's lanes."""
        if transfer.is_active and transfer.is_pipelined:
            transfer.lanes = transfer.tail_lanes
            self._hand_over(transfer, transfer.unproduced)

    def _on_layer(self, event: tuple[Transfer, float, float]) -> None:
        transfer, size, late = event
        if transfer.is_active and transfer.unproduced > 0:
            self._hand_over(transfer, size if size < transfer.unproduced else transfer.unproduced, late)

    def _hand_over(self, transfer: Transfer, size: float, late: float = 0.0) -> None:
        """`size` more bytes of `transfer` may go, the first `late` of them layers that would have
        left already one by one (they go first, and stand in no queue): it is re-timed (its rate
        set to 0 so the reshare re-arms its timer) and shares are recomputed, since a waiting
        transfer takes a share again."""
        self._advance()
        now = self.sim.now
        transfer.remaining = transfer.left_at(now) + size
        transfer.queued_cap = transfer.remaining - late if late > 0 else _INF
        transfer.unproduced -= size
        transfer.since_s, transfer.rate, transfer.is_stalled = now, 0.0, False
        transfer.version += 1
        if not self._retime_lone_sender(transfer):
            self._reshare()

    def cancel(self, transfer: Transfer) -> None:
        """Drop a transfer whose sender or receiver is gone; its bytes so far stay counted as sent.
        A transfer this link does not carry is ignored, so callers need not know its direction."""
        if transfer.is_active and transfer in self.active:
            self._advance()
            self._leave(transfer)
            self._reshare()

    def _leave(self, transfer: Transfer) -> None:
        """Take a finished or cancelled transfer off the link (its share goes at the next reshare)."""
        transfer.is_active = False
        self.active.remove(transfer)
        if transfer.weight < 1.0:
            self._num_newcomers -= 1
        if transfer.sender >= 0:
            count = self._sender_count[transfer.sender] - 1
            self._sender_count[transfer.sender] = count
            if count == 1:
                self._num_sharing -= 1
        if not self.active:
            self._idle_since = self.sim.now

    def _on_ramp(self, _: Any) -> None:
        """One round trip of slow start: the window doubles while it carries data (and pauses
        while nothing is sent, the senders idle or waiting for a layer: the next reshare that
        sends something re-arms it); it is open for good once it covers the rate."""
        self._is_ramp_armed = False
        if self._total_rate <= 0 or self._window_rate == _INF:
            return
        self._advance()
        state = self.state
        self._window *= 2.0
        self._window_rate = self._window / state.rtt_s if state.has_ramp else _INF
        if self._window_rate >= state.rate_bytes_per_s:
            self._window_rate = _INF
        self._reshare(retime_all=True)  # which arms the next round while the window is short of the rate

    def set_state(self, state: LinkState) -> None:
        """A link change (timeline or knob): shares are recomputed from now on."""
        self._advance()
        self.state = state
        self._take_ceilings(state)
        if self._window_rate < _INF:  # still ramping: the same window over the new round trip
            self._window_rate = self._window / state.rtt_s if state.has_ramp else _INF
        self._reshare()

    def _take_ceilings(self, state: LinkState) -> None:
        """The state's loss-limited ceilings per connection, kept: they are read at every share."""
        self._piped_ceiling = state.pipelined_lane_cap
        self._idle_ceiling = state.pipelined_lane_cap_after_idle

    def sync(self) -> None:
        """Bring the byte counters up to now (a sampler reads them between events)."""
        self._advance()
        self._note_queue()

    @property
    def num_active(self) -> int:
        return len(self.active)

    def newcomer_share(self) -> float:
        """KV bytes/s a cache starting now would get: an equal part with the transfers sending now,
        within its connections' loss cap and the slow-start window (costs.layer_sends merges the
        layers such a share clears between sends)."""
        senders = 1
        for transfer in self.active:
            if not transfer.is_stalled:
                senders += 1
        share = min(self.state.rate_bytes_per_s, self._window_rate) / senders
        cap = self.state.connections * self._piped_ceiling
        return (share if share < cap else cap) / self.state.wire_per_byte

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
                if self._total_rate >= rate * (1.0 - 1e-9):
                    self._saturated_s += dt
        self._last_s = now

    def _reshare(self, retime_all: bool = False) -> None:
        """Share the capacity among the active transfers; re-time those whose rate moved (all of
        them at a slow-start round). While the window ramps, a finish past the next round is not
        armed: that round re-times every transfer, and a heap of timers computed at a first
        window's rate would outlive the run by minutes (stale, but the loop would run to them)."""
        active = self.active
        if self._num_newcomers:
            self._promote(active)
        rates = self._shares(active)
        sim, now, total = self.sim, self.sim.now, 0.0
        is_ramping = self._window_rate < _INF
        horizon = (self._ramp_at if self._is_ramp_armed else now + self.state.rtt_s) if is_ramping else _INF
        for i in range(len(active)):  # not zip(strict=True): compiled, that is a call through Python
            transfer, rate = active[i], rates[i]
            total += rate
            if rate != transfer.rate or retime_all:
                transfer.remaining = transfer.left_at(now)
                transfer.since_s, transfer.rate = now, rate
                transfer.version = version = transfer.version + 1
                if rate > 0:
                    left_s = transfer.remaining / rate
                    end_s = now + left_s if left_s > 0 else now
                    if end_s <= horizon:
                        sim.schedule(end_s, self._on_finish, (transfer, version))
        self._total_rate = total
        self._note_queue()
        if is_ramping and not self._is_ramp_armed and total > 0:
            self._is_ramp_armed = True  # slow start goes on while something is sent
            self._ramp_at = now + self.state.rtt_s
            sim.schedule(self._ramp_at, self._on_ramp, None)

    def _retime_lone_sender(self, transfer: Transfer) -> bool:
        """The reshare's outcome without its sort and timers when `transfer` (just handed a layer,
        or just out of bytes: its rate set to 0) is the only one that can send: every other active
        transfer waits for a layer, no newcomer is weighted down and the window is open. Its share
        is then its cap within the rate and no other share moves (a layer-by-layer cache on a wide
        link, most of the time); False where the full reshare is needed."""
        if self._num_newcomers or self._window_rate < _INF:
            return False
        for other in self.active:
            if other is not transfer and not other.is_stalled:
                return False
        rate = self.state.rate_bytes_per_s
        if not transfer.is_stalled:
            cap = self._cap(transfer, transfer.lanes)
            if cap < rate:
                rate = cap
            transfer.rate = rate
            if rate > 0:
                left_s = transfer.remaining / rate
                self.sim.schedule(self.sim.now + left_s if left_s > 0 else self.sim.now, self._on_finish,
                                  (transfer, transfer.version))
        else:
            rate = 0.0
        self._total_rate = rate
        self._note_queue()
        return True

    def _note_queue(self) -> float:
        """The bytes queued beyond the path's BDP now, kept as the peak when higher: every byte
        produced and not yet delivered is in flight once the senders' window covers the BDP
        (tcp.py, standing queue); while it ramps, the window is all that is in flight."""
        active = self.active
        if not active:
            return 0.0
        self.has_sent = True
        rate = self.state.rate_bytes_per_s
        if rate == _INF:
            return 0.0
        now, backlog = self.sim.now, 0.0
        for transfer in active:
            left = transfer.left_at(now)
            backlog += left if left < transfer.queued_cap else transfer.queued_cap
        if self._window_rate < rate and self._window < backlog:
            backlog = self._window
        queued = backlog - rate * self.state.rtt_s
        if queued >= self.state.queue_bytes:
            self._overflow.check(now, self._saturated_s, backlog, rate * self.state.rtt_s, self.state.queue_bytes, rate)
            self._saturated_s = 0.0
        if queued > self.queue_peak_bytes:
            self.queue_peak_bytes = queued
        return queued if queued > 0.0 else 0.0

    def _cap(self, transfer: Transfer, lanes: float) -> float:
        """A transfer's ceiling now on `lanes` connections: nothing while it waits for a layer, their
        loss cap (none on a lossless link)."""
        if transfer.is_stalled:
            return 0.0
        ceiling = self._idle_ceiling if transfer.is_after_idle else self._piped_ceiling
        if ceiling == _INF:
            return _INF
        return lanes * ceiling * transfer.rate_factor

    def _shares(self, active: list[Transfer]) -> list[float]:
        """TCP shares the bottleneck per connection: each transfer's weight is the connections
        carrying it (a last layer rides its chunks' lanes), times its lockout weight; equal weights
        (most of the time) take the plain water-filling, which skips the weighted rounds."""
        left = self.state.rate_bytes_per_s
        if self._window_rate < left:
            left = self._window_rate
        shared: list[float] | None = None  # lossy: the loss-limited windows a sender's caches ride
        chunked: list[float] | None = None  # lossless: the connections they weigh by
        if self._num_sharing:
            if self._piped_ceiling < _INF:
                shared = sender_lanes(active, self.state.connections)
            else:
                chunked = sender_lanes(active, self.state.connections, CHUNK_BYTES, self.sim.now)
        caps: list[float] = []
        total = 0.0  # sum(caps), added as sum adds floats, without a call through Python
        is_equal, connections = self._num_newcomers == 0 and chunked is None, self.state.connections
        for i in range(len(active)):
            transfer = active[i]
            cap = self._cap(transfer, transfer.lanes if shared is None else shared[i])
            caps.append(cap)
            total += cap
            if cap > 0.0 and transfer.lanes != connections:
                is_equal = False
        if is_equal:
            return max_min(caps, total, left)
        return weighted_max_min(caps, [(active[i].lanes if chunked is None else chunked[i]) * active[i].weight
                                       for i in range(len(active))], left)

    def _has_incumbent(self, now_s: float) -> bool:
        """A full-weight transfer that started before now (one started at the same instant is a peer)."""
        for transfer in self.active:
            if transfer.weight == 1.0 and transfer.start_s < now_s:
                return True
        return False

    def _promote(self, active: list[Transfer]) -> None:
        """Once no incumbent (weight 1) is left to hold the queue, the oldest newcomers whose bytes
        fit in the buffer together take its place (at least the oldest); the later ones stay
        locked out behind them. So a backlog deeper than the buffer drains in the order it started,
        a buffer's worth at a time sharing the link (one sender's by its chunks: sender_lanes), as
        the live senders' chunk queues feed their connections' windows (at 10 Mbit/s, a backlog of
        minutes; at 50, bursts within the buffer)."""
        for transfer in active:
            if transfer.weight == 1.0:
                return
        now, room = self.sim.now, self.state.queue_bytes
        waiting = sorted(active, key=attrgetter("start_s"))
        for k, transfer in enumerate(waiting):
            room -= transfer.left_at(now) + transfer.unproduced
            if k > 0 and room < 0.0 and transfer.start_s > waiting[k - 1].start_s:
                break
            transfer.weight = 1.0
            self._num_newcomers -= 1

    def _on_finish(self, event: tuple[Transfer, int]) -> None:
        transfer, version = event
        if version != transfer.version or not transfer.is_active:
            return  # its rate changed since this timer was armed, or it was cancelled
        self._advance()
        sim = self.sim
        self.bytes_sent += transfer.left_at(sim.now)  # the float crumbs of the integral
        if transfer.unproduced > 0:  # it sent all it holds: it waits for its prefill's next layer
            transfer.remaining, transfer.since_s, transfer.rate, transfer.is_stalled = 0.0, sim.now, 0.0, True
            transfer.version += 1
            if not self._retime_lone_sender(transfer):
                self._reshare()
            return
        self._leave(transfer)
        transfer.remaining, transfer.rate = 0.0, 0.0
        self.bytes_delivered += int(transfer.num_bytes)
        self.num_delivered += 1
        passed_s = sim.now  # its last byte through the bottleneck
        if passed_s < self._overflow.holds_until_s:
            passed_s = self._overflow.arrival_s(passed_s)
        sim.schedule(passed_s + self.state.delay_s, transfer.on_done, transfer.arg)
        self._reshare()
