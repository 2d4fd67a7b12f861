"""Proof that a control connection comes from a worker this run started (issue 13).

The gateway makes one random secret per run; the launcher hands it to each worker in its
environment (never argv: `ps` shows argv to every user). On connect the gateway sends a fresh
nonce; the worker answers HMAC-SHA256(secret, label || nonce || node id) in its hello. The secret
never crosses the socket, and a proof is worth nothing for another connection or another node.
Which node ids exist and whether one is already connected is the session's to judge, not this
module's.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import logging
import os
import re
import secrets
from collections.abc import MutableMapping
from dataclasses import dataclass

from emulator.errors import WorkerError
from emulator.limits import HANDSHAKE_TIMEOUT_S, MAX_HELLO_BYTES, MAX_PENDING_HANDSHAKES
from emulator.wire import protocol as p

log = logging.getLogger(__name__)
SECRET_ENV = "PRFAAS_WORKER_SECRET"
SECRET_BYTES = 32
NONCE_BYTES = 32
MAX_LOGGED_REFUSALS = 100
_LABEL = b"prfaas-worker-hello/v1\0"  # keeps this MAC from meaning anything in another protocol
_HEX64 = re.compile(r"[0-9a-f]{64}")


def new_secret() -> str:
    """A fresh per-run secret, as the hex text the environment carries."""
    return secrets.token_hex(SECRET_BYTES)


def new_nonce() -> str:
    return secrets.token_hex(NONCE_BYTES)


def make_proof(secret: str, nonce: str, node: str) -> str:
    """The worker's answer to `nonce` as `node`: hex HMAC-SHA256 over a fixed-size nonce, then the id."""
    message = _LABEL + bytes.fromhex(nonce) + node.encode()
    return hmac.new(bytes.fromhex(secret), message, hashlib.sha256).hexdigest()


def check_proof(secret: str, nonce: str, node: str, proof: str) -> bool:
    """True when `proof` answers `nonce` for `node` under `secret`; compared in constant time."""
    return hmac.compare_digest(make_proof(secret, nonce, node), proof)


def take_secret(environ: MutableMapping[str, str] = os.environ) -> str:
    """The worker's secret, removed from `environ` so that no child process inherits it."""
    secret = environ.pop(SECRET_ENV, "")
    if not _HEX64.fullmatch(secret):
        raise WorkerError(f"{SECRET_ENV}: {'missing' if not secret else 'not 64 hex digits'}; "
                          "workers are started by the live engine's launcher, which sets it")
    return secret


class WorkerGate:
    """The gateway's side: the run's secret and the connections still proving themselves.

    `max_pending` bounds connections that have not yet said a valid hello, so a flood of idle
    sockets costs the gateway at most that many buffers, each for at most the handshake timeout.
    """

    def __init__(self, secret: str | None = None, max_pending: int = MAX_PENDING_HANDSHAKES,
                 timeout_s: float = HANDSHAKE_TIMEOUT_S) -> None:
        self.secret = secret or new_secret()
        self.max_pending, self.timeout_s = max_pending, timeout_s
        self.num_pending = self.num_refused = 0

    def __repr__(self) -> str:  # never print the secret
        return f"WorkerGate(pending={self.num_pending}/{self.max_pending})"

    def env(self) -> dict[str, str]:
        """What a worker's environment adds to carry the secret."""
        return {SECRET_ENV: self.secret}

    def try_begin(self) -> bool:
        """Take a pending-handshake slot; False (and logged) when all are taken: refuse the connection."""
        if self.num_pending >= self.max_pending:
            self.refuse("", f"{self.max_pending} handshakes already pending")
            return False
        self.num_pending += 1
        return True

    def refuse(self, claimed: str, reason: str) -> None:
        """Log one refused connection: each of the first MAX_LOGGED_REFUSALS, then only the
        2^k-th, so that a flood cannot fill the disk with log lines."""
        self.num_refused += 1
        n = self.num_refused
        if n <= MAX_LOGGED_REFUSALS or n & (n - 1) == 0:
            log.warning("worker port: refused a connection claiming node %s: %s (%d refused so far)",
                        claimed or "(none)", reason, n)

    def end(self) -> None:
        self.num_pending = max(self.num_pending - 1, 0)

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
