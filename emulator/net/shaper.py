"""Netem-like shaping of one link direction as pure arithmetic: loss, a rate-limited drop-tail
queue, then delay and jitter without reordering.

No I/O, threads or clocks: callers pass `now` (seconds on any monotonic clock) and the random
source, so the same shaper times packets in the relays and in unit tests with a fake clock. It does
not hold packets; it only says when each one is due (or that it is dropped).
"""

from __future__ import annotations

import math
import random
from collections import deque
from dataclasses import dataclass

from emulator.net.spec import LinkShape


@dataclass(frozen=True, slots=True)
class ShaperStats:
    """What one direction's shaper decided so far. `packets`/`bytes` were accepted for delivery."""

    packets: int = 0
    bytes: int = 0
    loss_drops: int = 0
    queue_drops: int = 0

    @property
    def drops(self) -> int:
        return self.loss_drops + self.queue_drops


class CorrelatedLoss:
    """Random loss with memory that keeps the long-run loss rate at exactly `loss_pct`.

    Each packet repeats the previous packet's fate with probability rho = loss_correlation_pct/100,
    and otherwise draws a fresh Bernoulli(p = loss_pct/100). That is the two-state Markov chain of
    the simple Gilbert model (the bad state always loses, the good state never does) with
        P(loss | previous lost) = p + rho (1 - p),   P(loss | previous kept) = p (1 - rho),
    whose stationary loss rate is p, lag-1 autocorrelation rho and mean burst length
    1 / ((1 - p)(1 - rho)). rho = 0 is plain Bernoulli loss. Netem's own `loss p correlation c`
    mixes uniform draws instead, which biases its long-run rate below p; this model does not.
    """

    __slots__ = ("_p", "_rho", "_last")

    def __init__(self, loss_pct: float, correlation_pct: float, rng: random.Random,
                 last: bool | None = None) -> None:
        self._p = loss_pct / 100.0
        self._rho = correlation_pct / 100.0
        # Start from the stationary distribution so that even short runs have the right mean.
        self._last = (rng.random() < self._p) if last is None else last

    def lose(self, rng: random.Random) -> bool:
        if self._p <= 0.0:
            return False
        if self._rho > 0.0 and rng.random() < self._rho:
            return self._last
        self._last = rng.random() < self._p
        return self._last

    def with_params(self, loss_pct: float, correlation_pct: float,
                    rng: random.Random) -> CorrelatedLoss:
        """The same chain with new parameters; a burst in progress carries over."""
        return CorrelatedLoss(loss_pct, correlation_pct, rng, last=self._last)


@dataclass(slots=True)
class _Pending:
    """A packet admitted but not yet fully serialised: the backlog that a reshape re-times."""

    size: int
    packets: int  # a burst (several segments sent as one) counts each of them
    tx_end: float
    jitter_u: float  # the packet's jitter draw in [-1, 1], reused when re-timed
    delivery: float


class DirectionShaper:
    """One direction of a link with netem's order of effects, applied per packet at `admit`:

    1. loss (`CorrelatedLoss`);
    2. a bottleneck served at `rate_bytes_per_s`: tx_end = max(now, link_free_at) + size / rate,
       with drop-tail once `queue_packets` packets wait for serialisation (the one on the wire
       included; packets already in propagation do not count, as on a real link);
    3. propagation: delay + jitter * U(-1, 1), clipped at 0, and never before the previous
       packet's delivery, so packets are not reordered (netem reorders on jitter; TCP over a real
       path mostly does not).

    An unshaped rate (inf) adds no serialisation delay and never queues. Not thread-safe: the
    relays call it under their own lock.
    """

    def __init__(self, shape: LinkShape, rng: random.Random) -> None:
        self._shape = shape
        self._rng = rng
        self._rate = shape.rate_bytes_per_s
        self._loss = CorrelatedLoss(shape.loss_pct, shape.loss_correlation_pct, rng)
        self._pending: deque[_Pending] = deque()
        self._num_pending_packets = 0  # the queue's length in packets, bursts counted by segment
        self._link_free_at = -math.inf
        self._last_delivery = -math.inf
        self._last_fixed_delivery = -math.inf  # newest delivery among packets off the queue
        self._packets = 0
        self._bytes = 0
        self._loss_drops = 0
        self._queue_drops = 0

    @property
    def shape(self) -> LinkShape:
        return self._shape

    @property
    def stats(self) -> ShaperStats:
        return ShaperStats(self._packets, self._bytes, self._loss_drops, self._queue_drops)

    @property
    def num_pending(self) -> int:
        """Admissions (a burst is one) waiting for serialisation as of the last call: the last ones
        `admit` accepted."""
        return len(self._pending)

    def backlog_s(self, now: float) -> float:
        """Seconds until the bottleneck is idle again (0 when it already is)."""
        return max(0.0, self._link_free_at - now)

    def admit(self, size_bytes: int, now: float, packets: int = 1) -> float | None:
        """The delivery time of a packet of `size_bytes` offered at `now`, or None if dropped.

        `packets` > 1 is a burst of that many segments totalling `size_bytes`: it is served as one
        unit and counts as `packets` in the queue and the stats. Loss draws once per call, so
        lossy links are fed single packets (the tun relay turns segmentation off for them).
        """
        self._release(now)
        if self._loss.lose(self._rng):
            self._loss_drops += 1
            return None
        if self._num_pending_packets >= self._shape.queue_packets:
            self._queue_drops += 1
            return None
        tx_end = max(now, self._link_free_at) + size_bytes / self._rate
        self._link_free_at = tx_end
        jitter_u = self._rng.uniform(-1.0, 1.0) if self._shape.jitter_s > 0 else 0.0
        delivery = max(tx_end + self._propagation(jitter_u), self._last_delivery)
        self._last_delivery = delivery
        if tx_end > now:
            self._pending.append(_Pending(size_bytes, packets, tx_end, jitter_u, delivery))
            self._num_pending_packets += packets
        else:
            self._last_fixed_delivery = delivery
        self._packets += packets
        self._bytes += size_bytes
        return delivery

    def reshape(self, shape: LinkShape, now: float) -> list[float]:
        """Switch to `shape` at `now`, atomically, for every packet admitted from now on.

        The backlog still waiting for serialisation is re-timed as if the new shape had been in
        place from `now` (the packet on the wire keeps the bytes it already sent), so a new rate
        shows at once rather than after the old queue drains. Packets already in propagation keep
        their times. Returns the new delivery times of the re-timed packets, oldest first: they
        are the last `len(result)` packets `admit` accepted. A smaller `queue_packets` drops
        nothing already queued; it applies to new arrivals.
        """
        self._release(now)
        old_rate = self._rate
        self._shape = shape
        self._rate = shape.rate_bytes_per_s
        self._loss = self._loss.with_params(shape.loss_pct, shape.loss_correlation_pct, self._rng)
        if not self._pending:
            return []
        head = self._pending[0]
        # `old_rate` is finite here: an unshaped link never has pending packets.
        tx_end = now + (head.tx_end - now) * old_rate / self._rate
        last = self._last_fixed_delivery
        for index, packet in enumerate(self._pending):
            if index:
                tx_end += packet.size / self._rate
            packet.tx_end = tx_end
            packet.delivery = last = max(tx_end + self._propagation(packet.jitter_u), last)
        self._link_free_at = tx_end
        self._last_delivery = last
        retimed = [packet.delivery for packet in self._pending]
        self._release(now)
        return retimed

    def _propagation(self, jitter_u: float) -> float:
        return max(0.0, self._shape.delay_s + jitter_u * self._shape.jitter_s)

    def _release(self, now: float) -> None:
        """Forget packets whose serialisation has ended by `now`; they no longer count as queued."""
        pending = self._pending
        while pending and pending[0].tx_end <= now:
            done = pending.popleft()
            self._last_fixed_delivery = done.delivery
            self._num_pending_packets -= done.packets
