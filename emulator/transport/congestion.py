"""Congestion signals from TCP_INFO: a pure function of two samples, and a monitor that samples.

`signal_from_samples` turns two consecutive readings of the same connections into one
`CongestionSignal` (goodput, retransmission rate, RTT inflation, queue, cwnd); it does no I/O and
takes time as an argument. `CongestionMonitor` owns the I/O: it reads its sockets when its owner
calls `sample(now)` (or from `run`), keeps per-destination egress counters and a bounded history.
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType

from emulator.transport.tcp_info import TcpInfo, TcpInfoError, read_tcp_info

log = logging.getLogger(__name__)

_U32 = 1 << 32
DEFAULT_MAX_NUM_HISTORY = 1200  # 5 minutes at 0.25 s


@dataclass(frozen=True, slots=True)
class CongestionSignal:
    """How the monitored connections fared over one interval ending at `at_s`.

    goodput_bytes_per_s: newly acknowledged bytes over the interval, summed over connections.
    retrans_rate: retransmitted segments / data segments sent (retransmissions included) in the
        interval, over all connections; 0 when nothing was sent.
    num_retrans: retransmitted segments in the interval.
    rtt_inflation: mean over connections of smoothed RTT / minimum RTT seen, at least 1; 1 when
        no connection has an RTT yet. Queueing on the path shows here before loss does.
    send_queue_bytes: written but unacknowledged bytes (SIOCOUTQ) at the end of the interval.
    cwnd: congestion windows at the end of the interval, summed, in segments.
    """

    at_s: float
    num_connections: int
    goodput_bytes_per_s: float
    retrans_rate: float
    num_retrans: int
    rtt_inflation: float
    send_queue_bytes: int
    cwnd: int


def signal_from_samples(prev: Sequence[TcpInfo], cur: Sequence[TcpInfo], dt_s: float, *,
                        at_s: float = 0.0) -> CongestionSignal:
    """The signal over `dt_s` seconds between two readings; `prev[i]` and `cur[i]` must be the
    same connection. Fields the kernel did not report (None) count as no change.

    The u32 counters (segments, total_retrans) are differenced modulo 2**32, so a wrap between
    the samples still gives the right count.
    """
    if len(prev) != len(cur):
        raise ValueError(f"signal_from_samples: {len(prev)} previous and {len(cur)} current "
                         "samples; pass one pair per connection")
    if not dt_s > 0:
        raise ValueError(f"signal_from_samples: dt_s={dt_s!r}; the interval must be positive")
    pairs = list(zip(prev, cur, strict=True))
    acked_bytes = sum(_delta_u64(p.bytes_acked, c.bytes_acked) for p, c in pairs)
    num_retrans = sum(_delta_u32(p.total_retrans, c.total_retrans) for p, c in pairs)
    num_sent = sum(_segments_sent(p, c) for p, c in pairs)
    inflations = [r for p, c in pairs if (r := _rtt_inflation(p, c)) is not None]
    return CongestionSignal(
        at_s=at_s,
        num_connections=len(pairs),
        goodput_bytes_per_s=acked_bytes / dt_s,
        retrans_rate=num_retrans / max(num_sent, num_retrans) if num_retrans else 0.0,
        num_retrans=num_retrans,
        rtt_inflation=sum(inflations) / len(inflations) if inflations else 1.0,
        send_queue_bytes=sum(_queued_bytes(c) for c in cur),
        cwnd=sum(c.snd_cwnd for c in cur),
    )


def _delta_u32(before: int | None, after: int | None) -> int:
    if before is None or after is None:
        return 0
    return (after - before) % _U32


def _delta_u64(before: int | None, after: int | None) -> int:
    # 2**64 bytes do not wrap in a lab run; a negative step can only be a mismatched pair.
    if before is None or after is None:
        return 0
    return max(0, after - before)


def _segments_sent(p: TcpInfo, c: TcpInfo) -> int:
    """Data segments sent (Linux 4.6+), else all segments sent (4.2+, pure ACKs included)."""
    if p.data_segs_out is not None and c.data_segs_out is not None:
        return _delta_u32(p.data_segs_out, c.data_segs_out)
    return _delta_u32(p.segs_out, c.segs_out)


def _rtt_inflation(p: TcpInfo, c: TcpInfo) -> float | None:
    """Smoothed RTT over the kernel's windowed minimum RTT; before Linux 4.10 (no min_rtt) over
    the smaller of the two smoothed RTTs. None when the connection has no RTT sample yet."""
    if c.rtt_us <= 0:
        return None
    floor = c.min_rtt_us or min((r for r in (p.rtt_us, c.rtt_us) if r > 0), default=c.rtt_us)
    # The kernel's minimum can expire and move above an old smoothed value; that is not deflation.
    return max(1.0, c.rtt_us / floor)


def _queued_bytes(c: TcpInfo) -> int:
    """SIOCOUTQ when it was read, else the unsent bytes alone (all TCP_INFO knows)."""
    if c.send_queue_bytes is not None:
        return c.send_queue_bytes
    return c.notsent_bytes or 0


class CongestionMonitor:
    """Samples a set of TCP sockets into `CongestionSignal`s and counts egress per destination.

    The owner drives time: `sample(now)` with its own clock, or `run` in a thread of its own.
    Each socket's latest reading is the baseline for the next interval, and `add` takes one at
    once, so a connection added between samples contributes only what it did after being added.
    A socket that is closed (or fails to sample) is dropped at the next sample; its last partial
    interval is not counted. All methods are thread-safe; sampling holds the lock only for
    non-blocking getsockopt/ioctl calls.
    """

    def __init__(self, max_num_history: int = DEFAULT_MAX_NUM_HISTORY) -> None:
        if max_num_history < 1:
            raise ValueError(f"max_num_history: {max_num_history} must be at least 1")
        self._lock = threading.Lock()
        self._sock_to_info: dict[socket.socket, TcpInfo] = {}
        self._last_at_s: float | None = None
        self._history: deque[CongestionSignal] = deque(maxlen=max_num_history)
        self._dest_to_bytes: dict[str, int] = {}

    def add(self, sock: socket.socket) -> None:
        """Start watching `sock` (a second add is a no-op). Raises `TcpInfoError` for a socket
        that cannot be sampled (closed, not TCP)."""
        baseline = read_tcp_info(sock)
        with self._lock:
            self._sock_to_info.setdefault(sock, baseline)

    def remove(self, sock: socket.socket) -> bool:
        """Stop watching `sock`; False when it was not watched."""
        with self._lock:
            return self._sock_to_info.pop(sock, None) is not None

    @property
    def num_connections(self) -> int:
        with self._lock:
            return len(self._sock_to_info)

    def record_sent(self, dest: str, nbytes: int) -> None:
        """Count `nbytes` handed to the transport for `dest` (the egress metric)."""
        if nbytes < 0:
            raise ValueError(f"record_sent: nbytes={nbytes} for {dest!r} is negative")
        with self._lock:
            self._dest_to_bytes[dest] = self._dest_to_bytes.get(dest, 0) + nbytes

    @property
    def bytes_sent_to(self) -> Mapping[str, int]:
        """A snapshot of bytes recorded per destination since the monitor was made."""
        with self._lock:
            return MappingProxyType(dict(self._dest_to_bytes))

    @property
    def history(self) -> tuple[CongestionSignal, ...]:
        """The most recent signals, oldest first (at most `max_num_history`)."""
        with self._lock:
            return tuple(self._history)

    def sample(self, now: float) -> CongestionSignal | None:
        """Read every socket and return the signal since the previous sample.

        The first call only sets the baseline and returns None, as does a call at the same
        `now` as the previous one (nothing to divide by; the baseline is kept).
        """
        with self._lock:
            last = self._last_at_s
            if last is not None and now < last:
                raise ValueError(f"sample: now={now} is before the previous sample at {last}; "
                                 "pass one monotonic clock")
            if last is not None and now == last:
                return None
            pairs = self._read_all()
            self._last_at_s = now
            if last is None:
                return None
            signal = signal_from_samples([p for p, _ in pairs], [c for _, c in pairs], now - last,
                                         at_s=now)
            self._history.append(signal)
            return signal

    def _read_all(self) -> list[tuple[TcpInfo, TcpInfo]]:
        """(previous, new) reading per live socket; new readings become the baselines."""
        pairs: list[tuple[TcpInfo, TcpInfo]] = []
        for sock, prev in list(self._sock_to_info.items()):
            try:
                if sock.fileno() < 0:
                    raise TcpInfoError("tcp_info: socket closed")
                cur = read_tcp_info(sock)
            except TcpInfoError as err:
                log.info("congestion monitor: dropping a socket (%s)", err)
                del self._sock_to_info[sock]
                continue
            self._sock_to_info[sock] = cur
            pairs.append((prev, cur))
        return pairs

    def run(self, interval_s: float, stop_event: threading.Event,
            on_signal: Callable[[CongestionSignal], None] | None = None,
            clock: Callable[[], float] = time.monotonic) -> None:
        """Sample every `interval_s` until `stop_event` is set; blocks, so give it a thread.

        Ticks keep a fixed cadence; after a stall the next tick is one interval from now rather
        than a burst of catch-up samples. Exceptions from `on_signal` end the loop.
        """
        if not interval_s > 0:
            raise ValueError(f"run: interval_s={interval_s!r} must be positive")
        next_at = clock()
        self.sample(next_at)
        while not stop_event.wait(max(0.0, next_at + interval_s - clock())):
            now = clock()
            next_at = now if now - next_at > 2 * interval_s else next_at + interval_s
            signal = self.sample(now)
            if signal is not None and on_signal is not None:
                on_signal(signal)
