"""Loss recovery behind a full drop-tail buffer: what the fluid link (link.py) adds when its
senders' windows outgrow the bottleneck's queue.

With a backlog deeper than the buffer, the senders' windows keep growing (a window past the BDP
only deepens the queue) until what they hold in flight no longer fits: the buffer drops the
newest packets of every connection at once. Each sender learns of its loss one queue's wait later,
when the packets behind the hole arrive, and its retransmission waits a whole queue again; the
bytes behind the hole, delivered meanwhile, are held by the receiver until the hole is filled.
So the caches whose last bytes pass the bottleneck in the queue's wait after the loss is seen
arrive together when the retransmissions do, and the windows, cut to WINDOW_BACKOFF, grow back
until the next overflow. Throughput is not lost (the link sends the data behind the holes), only
those caches' time.

bench/link_overload.py (the tun link at 10 Mbit/s, 10 ms, 1,000 packets; 3.1 MB caches offered
from one sender at 15 and 11 Mbit/s for 60 s; bench/results/link_overload.json, 2026-12-07): at
15 Mbit/s, the link full throughout, the windows grew by 0.42 of its rate per second until their
first loss (WINDOW_GROWTH; 0.32 at 11 Mbit/s, where they idle at times), and the run retransmitted
1,132 segments from then on. The fluid read the caches' mean time -5.0 % and +6.6 % of live
(without this model -14.9 % and +1.4 %); since one sender's caches take its connections chunk by
chunk in order (transfer.sender_lanes), -12.4 % and +1.1 % (the bench again, 2026-12-07 06:10).
Pure: the link passes the time, the bytes in flight and the rate in.
"""

from __future__ import annotations

WINDOW_GROWTH = 0.42  # the senders' window grows by this share of the link's rate per second
WINDOW_BACKOFF = 0.7  # cubic's multiplicative decrease at a loss (RFC 8312's beta)


class QueueOverflow:
    """The senders' aggregate window (it starts at the BDP, where the fluid's slow start leaves
    it) and the spells whose finishing caches wait for a retransmission."""

    __slots__ = ("window_bytes", "_recovering_until_s", "_holds", "holds_until_s", "num_overflows")

    def __init__(self) -> None:
        self.window_bytes = 0.0
        self._recovering_until_s = 0.0  # a window in recovery does not grow (one queue wait)
        self._holds: list[tuple[float, float]] = []  # (from, until): caches finishing then arrive at until
        self.holds_until_s = 0.0  # the last spell's end: a cache finishing after it is not held
        self.num_overflows = 0

    def check(self, now_s: float, saturated_s: float, backlog_bytes: float, bdp_bytes: float,
              queue_bytes: float, rate_bytes_per_s: float) -> None:
        """Grow the window by the `saturated_s` seconds the link was full since the last check (a
        window that fills the link grows as its acks come, not one limited by what the senders hold
        or one in recovery), then see whether the bytes in flight (the backlog, up to the window)
        overflow the buffer now: if so, the caches whose last bytes pass the bottleneck between one
        and two queue waits from now arrive at the end of that spell, and the window backs off and
        recovers."""
        growing_s = now_s - self._recovering_until_s
        if growing_s > 0.0:
            self.window_bytes += WINDOW_GROWTH * rate_bytes_per_s * (saturated_s if saturated_s < growing_s else growing_s)
        if self.window_bytes < bdp_bytes:
            self.window_bytes = bdp_bytes
        in_flight = backlog_bytes if backlog_bytes < self.window_bytes else self.window_bytes
        if in_flight < bdp_bytes + queue_bytes or now_s < self._recovering_until_s:
            return
        wait_s = queue_bytes / rate_bytes_per_s
        self._holds = [hold for hold in self._holds if hold[1] > now_s]
        self._holds.append((now_s + wait_s, now_s + 2.0 * wait_s))
        self.holds_until_s = now_s + 2.0 * wait_s
        self._recovering_until_s = now_s + wait_s
        self.window_bytes = WINDOW_BACKOFF * (bdp_bytes + queue_bytes)
        self.num_overflows += 1

    def arrival_s(self, finish_s: float) -> float:
        """When a cache whose last byte passes the bottleneck at `finish_s` is whole at the receiver
        (before the propagation delay)."""
        for start_s, until_s in self._holds:
            if start_s <= finish_s < until_s:
                return until_s
        return finish_s
