"""A prefill worker's KV senders: one persistent KVSender per target, opened lazily in its netns.

One CongestionMonitor watches every sender's connections and yields the `stats.link` numbers. It
does not pick targets (the gateway names them) or decide what to ship (the prefill engine does).
"""

from __future__ import annotations

import logging
import socket
import time

from emulator.errors import WorkerError
from emulator.net.netns import netns_socket
from emulator.transport.congestion import CongestionMonitor
from emulator.transport.frames import HelloProof
from emulator.transport.sender import KVSender
from emulator.transport.tcp_info import TcpInfoError, read_tcp_info
from emulator.wire.protocol import LinkStats

log = logging.getLogger(__name__)
Target = tuple[str, int]


class KvLinks:
    def __init__(self, netns: str | None, proof: HelloProof, sender_id: str, num_connections: int = 4,
                 congestion: str = "cubic") -> None:
        """`proof` and `sender_id` (the run's secret and this worker's node id) open every connection."""
        self.netns = netns
        self.proof, self.sender_id = proof, sender_id
        self.num_connections = num_connections
        self.congestion = congestion
        self.monitor = CongestionMonitor()
        self._target_to_sender: dict[Target, KVSender] = {}

    def _make_socket(self) -> socket.socket:
        return netns_socket(self.netns)

    async def sender(self, target: Target) -> KVSender:
        """The sender for `target`, connecting it on first use (or after it gave up reconnecting; a
        sender whose idle connections the receiver closed reopens them itself).

        Raises WorkerError naming the target when it cannot be reached.
        """
        sender = self._target_to_sender.get(target)
        if sender is not None and not sender.is_broken:
            return sender
        if sender is not None:
            log.warning("KV sender to %s:%d lost every connection; reconnecting", *target)
            await sender.close()
            del self._target_to_sender[target]
        sender = KVSender(self._make_socket, target, proof=self.proof, sender_id=self.sender_id,
                          num_connections=self.num_connections, congestion=self.congestion, monitor=self.monitor)
        try:
            await sender.start()
        except (OSError, TimeoutError) as err:
            await sender.close()
            raise WorkerError(f"kv_target: {target[0]}:{target[1]} unreachable from namespace "
                              f"{self.netns or 'host'} ({err or type(err).__name__}); check the "
                              "decode worker's kv_port and address") from None
        self._target_to_sender[target] = sender
        return sender

    @property
    def bytes_sent(self) -> int:
        return sum(s.bytes_sent for s in self._target_to_sender.values())

    def link_stats(self, now: float | None = None) -> LinkStats | None:
        """The link's state since the previous call; None before any sender exists."""
        if not self._target_to_sender:
            return None
        signal = self.monitor.sample(time.monotonic() if now is None else now)
        return LinkStats(
            retrans_rate=signal.retrans_rate if signal else 0.0,
            rtt_ms=self._mean_rtt_ms(),
            rtt_inflation=signal.rtt_inflation if signal else 1.0,
            bytes_sent=self.bytes_sent,
        )

    def _mean_rtt_ms(self) -> float:
        rtts = []
        for sender in self._target_to_sender.values():
            for sock in list(sender.sockets):
                try:
                    info = read_tcp_info(sock)
                except (TcpInfoError, OSError):
                    continue
                if info.rtt_us > 0:
                    rtts.append(info.rtt_us / 1000)
        return sum(rtts) / len(rtts) if rtts else 0.0

    async def close(self) -> None:
        for sender in self._target_to_sender.values():
            await sender.close()
        self._target_to_sender.clear()
