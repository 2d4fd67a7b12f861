"""Proof that a connection comes from a worker this run started (issues 13 and 25).

The gateway makes one random secret per run; the launcher hands it to each worker in its
environment (never argv: `ps` shows argv to every user). On connect the listening side sends a fresh
nonce; the connecting side answers HMAC-SHA256(secret, label || nonce || node id). The secret never
crosses the socket, and a proof is worth nothing for another connection, another node or the other
port: the worker port (the gateway's) and the KV port (a decode worker's) use different labels.
Which node ids exist and whether one is already connected is the session's to judge, not this
module's. Handshake slots are per class of peer (see `WorkerGate`).
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import logging
import os
import re
import secrets
import socket
from collections.abc import Callable, MutableMapping
from dataclasses import dataclass
from enum import StrEnum

from emulator.errors import WorkerError
from emulator.limits import HANDSHAKE_TIMEOUT_S, MAX_HELLO_BYTES, MAX_PENDING_HANDSHAKES
from emulator.wire import protocol as p

log = logging.getLogger(__name__)
SECRET_ENV = "PRFAAS_WORKER_SECRET"
SECRET_BYTES = 32
NONCE_BYTES = 32
MAX_LOGGED_REFUSALS = 100
# Labels keep a MAC from meaning anything in another protocol, or on the other port.
WORKER_LABEL = b"prfaas-worker-hello/v1\0"
KV_LABEL = b"prfaas-kv-hello/v1\0"
_HEX64 = re.compile(r"[0-9a-f]{64}")


def new_secret() -> str:
    """A fresh per-run secret, as the hex text the environment carries."""
    return secrets.token_hex(SECRET_BYTES)


def new_nonce() -> str:
    return secrets.token_hex(NONCE_BYTES)


def make_proof(secret: str, nonce: str, node: str, label: bytes = WORKER_LABEL) -> str:
    """The answer to `nonce` as `node`: hex HMAC-SHA256 over the label, a fixed-size nonce, then the id."""
    message = label + bytes.fromhex(nonce) + node.encode()
    return hmac.new(bytes.fromhex(secret), message, hashlib.sha256).hexdigest()


def check_proof(secret: str, nonce: str, node: str, proof: str, label: bytes = WORKER_LABEL) -> bool:
    """True when `proof` answers `nonce` for `node` under `secret`; compared in constant time."""
    return hmac.compare_digest(make_proof(secret, nonce, node, label), proof)


class KvHelloProof:
    """The KV port's side of the same scheme, in the bytes the transport's frames carry: a decode
    worker's receiver challenges each connection with `new_nonce()`, a prefill worker's sender
    answers `prove(nonce, its node id)`. The transport takes it as an object (it may not import
    this package), so one HMAC scheme serves both ports."""

    __slots__ = ("_secret",)

    def __init__(self, secret: str) -> None:
        self._secret = secret

    def __repr__(self) -> str:  # never print the secret
        return "KvHelloProof()"

    def new_nonce(self) -> bytes:
        return secrets.token_bytes(NONCE_BYTES)

    def prove(self, nonce: bytes, sender: str) -> bytes:
        return bytes.fromhex(make_proof(self._secret, nonce.hex(), sender, KV_LABEL))

    def check(self, nonce: bytes, sender: str, proof: bytes) -> bool:
        return hmac.compare_digest(self.prove(nonce, sender), bytes(proof))


def take_secret(environ: MutableMapping[str, str] = os.environ) -> str:
    """The worker's secret, removed from `environ` so that no child process inherits it."""
    secret = environ.pop(SECRET_ENV, "")
    if not _HEX64.fullmatch(secret):
        raise WorkerError(f"{SECRET_ENV}: {'missing' if not secret else 'not 64 hex digits'}; "
                          "workers are started by the live engine's launcher, which sets it")
    return secret


class PeerClass(StrEnum):
    """Whose connection it is, as the kernel tells (emulator/net/peer_uid.py): each class has its
    own handshake slots, so one class can never take another's."""

    OWNER = "owner"  # a process of the gateway's own user: the run's workers run as it
    OTHER = "other"  # another local user, or a peer the kernel cannot name


PeerUid = Callable[[socket.socket], "int | None"]


class WorkerGate:
    """The gateway's side: the run's secret and the connections still proving themselves.

    Slots (issue 25): at most `max_pending` connections of each PeerClass may be unproven at once,
    each for at most `timeout_s` (the proof deadline). When a class's slots are all taken, its
    oldest unproven connection is closed to make room, so a newcomer always gets its challenge: idle
    sockets, however many, cannot keep a worker out. Without `peer_uid` every peer is OTHER. Another
    user's connections never take the run user's slots; the run's own user can read the secret from
    its workers anyway, so it is trusted with them. A flood costs the gateway at most
    2 x `max_pending` buffers of MAX_HELLO_BYTES.
    """

    def __init__(self, secret: str | None = None, max_pending: int = MAX_PENDING_HANDSHAKES,
                 timeout_s: float = HANDSHAKE_TIMEOUT_S, peer_uid: PeerUid | None = None) -> None:
        self.secret = secret or new_secret()
        self.max_pending, self.timeout_s = max_pending, timeout_s
        self.peer_uid = peer_uid
        self.num_refused = 0
        self._pending: dict[PeerClass, dict[asyncio.StreamWriter, None]] = {c: {} for c in PeerClass}  # oldest first
        self._evicted: set[asyncio.StreamWriter] = set()

    def __repr__(self) -> str:  # never print the secret
        return f"WorkerGate(pending={self.num_pending}/{self.max_pending} per class)"

    @property
    def num_pending(self) -> int:
        return sum(map(len, self._pending.values()))

    def num_pending_of(self, peer_class: PeerClass) -> int:
        return len(self._pending[peer_class])

    def env(self) -> dict[str, str]:
        """What a worker's environment adds to carry the secret."""
        return {SECRET_ENV: self.secret}

    def classify(self, writer: asyncio.StreamWriter) -> PeerClass:
        sock = writer.get_extra_info("socket")
        uid = self.peer_uid(sock) if self.peer_uid is not None and sock is not None else None
        return PeerClass.OWNER if uid is not None and uid == os.geteuid() else PeerClass.OTHER

    async def admit(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> Admission:
        """A new connection's whole handshake: a slot in its class (closing that class's oldest
        unproven connection if none is free), the challenge, and the judgement of its hello."""
        peer_class = self.classify(writer)
        pool = self._pending[peer_class]
        if len(pool) >= self.max_pending:
            oldest = next(iter(pool))
            del pool[oldest]
            self._evicted.add(oldest)
            oldest.close()  # its handshake ends at once, on the closed stream
        pool[writer] = None
        try:
            admission = await self.handshake(reader, writer)
        finally:
            pool.pop(writer, None)
        if writer in self._evicted:
            self._evicted.discard(writer)
            return Admission(admission.claimed, None, f"closed unproven to make room for a newer connection "
                             f"(all {self.max_pending} {peer_class} slots were taken)")
        return admission

    def refuse(self, claimed: str, reason: str) -> None:
        """Log one refused connection: each of the first MAX_LOGGED_REFUSALS, then only the
        2^k-th, so that a flood cannot fill the disk with log lines."""
        self.num_refused += 1
        n = self.num_refused
        if n <= MAX_LOGGED_REFUSALS or n & (n - 1) == 0:
            log.warning("worker port: refused a connection claiming node %s: %s (%d refused so far)",
                        claimed or "(none)", reason, n)

    async def handshake(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> Admission:
        """Challenge a new connection and judge its hello's proof (within the handshake timeout)."""
        nonce = new_nonce()
        try:
            await p.write_message(writer, p.Challenge(nonce=nonce))
            line = await asyncio.wait_for(p.read_line(reader, MAX_HELLO_BYTES), self.timeout_s)
        except TimeoutError:
            return Admission("", None, f"no hello within {self.timeout_s:g} s")
        except (WorkerError, ConnectionError, OSError) as err:
            return Admission("", None, str(err) or type(err).__name__)
        claimed = p.claimed_node(line)
        try:
            msg = p.decode(line)
        except WorkerError as err:
            return Admission(claimed, None, str(err))
        if not isinstance(msg, p.Hello):
            return Admission(claimed, None, f"sent {msg.op} instead of hello")
        if not check_proof(self.secret, nonce, msg.node, msg.proof):
            return Admission(claimed, None, "wrong proof for this run")
        return Admission(claimed, msg, "")


@dataclass(frozen=True, slots=True)
class Admission:
    """How a handshake ended: the hello whose proof holds, or why the connection is refused."""

    claimed: str  # the node id the hello names, as printable text ('' when none could be read)
    hello: p.Hello | None
    reason: str  # '' when the proof holds
