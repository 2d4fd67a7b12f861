"""The relays' control channel: JSON lines over a Unix socket, one reply per request.

A request is `{"op": "update"|"counters"|"status"|"route"|"stop", ...}`; a reply is
`{"ok": true, ...}` or `{"ok": false, "error": "<one line>", "kind": "spec"|"request"|"relay"}`.
Lines are capped at MAX_LINE_BYTES: a longer one is discarded as it streams in and answered with an
error, so no client can make a relay allocate without bound or crash it. The server runs in its own
threads so that the threaded TUN relay and the asyncio proxy relay share it.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import stat
import threading
from collections.abc import Callable
from typing import Any

from emulator.errors import LinkSpecError, PrfaasError, TopologyError
from emulator.net.spec import LinkSpec, parse_link_spec

log = logging.getLogger(__name__)

MAX_LINE_BYTES = 64 * 1024
MAX_CLIENTS = 8
OPS = ("update", "counters", "status", "route", "stop")

Reply = dict[str, Any]
Handler = Callable[[dict[str, Any]], Reply]


class RequestError(PrfaasError):
    """A control request is malformed or names an operation this relay does not have."""


def spec_from_update(request: dict[str, Any]) -> LinkSpec:
    """The LinkSpec of an `update` request; RequestError/LinkSpecError name what is wrong."""
    if not isinstance(request.get("spec"), dict):
        raise RequestError('update: needs "spec", a LinkSpec JSON object')
    return parse_link_spec(request["spec"], where="spec")


class RelayUnreachable(TopologyError):
    """The control channel itself failed: no relay listening, a timeout, a dropped connection."""


class LineTooLong(PrfaasError):
    """A control line went past MAX_LINE_BYTES without a newline."""


def one_line(text: str) -> str:
    return "; ".join(part.strip() for part in str(text).splitlines() if part.strip())


def error_reply(err: BaseException) -> Reply:
    kind = "spec" if isinstance(err, LinkSpecError) else "request" if isinstance(
        err, RequestError | LineTooLong) else "relay"
    return {"ok": False, "error": one_line(str(err)) or type(err).__name__, "kind": kind}


class LineReader:
    """Splits a byte stream into lines of at most `max_bytes`, never buffering more than that."""

    def __init__(self, sock: socket.socket, max_bytes: int = MAX_LINE_BYTES) -> None:
        self._sock = sock
        self._max = max_bytes
        self._buf = bytearray()
        self._discarding = False

    def next_line(self) -> bytes | None:
        """The next line without its newline; None at end of stream; LineTooLong for an
        oversized line (raised as soon as the cap is passed; the rest of it is skipped)."""
        while True:
            newline = self._buf.find(b"\n")
            if newline >= 0:
                line = bytes(self._buf[:newline])
                del self._buf[: newline + 1]
                if self._discarding:
                    self._discarding = False
                    continue
                if newline > self._max:
                    raise LineTooLong(f"control line longer than {self._max} bytes; "
                                      "request rejected")
                return line
            if self._discarding:
                self._buf.clear()
            elif len(self._buf) > self._max:
                self._buf.clear()
                self._discarding = True
                raise LineTooLong(f"control line longer than {self._max} bytes; request rejected")
            chunk = self._sock.recv(16384)
            if not chunk:
                return None
            self._buf += chunk


def parse_request(line: bytes) -> dict[str, Any]:
    try:
        request = json.loads(line)
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise RequestError(f"bad request: not JSON ({err})") from None
    if not isinstance(request, dict):
        raise RequestError("bad request: expected a JSON object like {\"op\": \"status\"}")
    op = request.get("op")
    if op not in OPS:
        raise RequestError(f"unknown op {op!r}; expected one of {', '.join(OPS)}")
    return request


class ControlServer:
    """Serves `handler` on a Unix socket at `path`, one thread per client (at most MAX_CLIENTS).

    The handler gets a parsed request whose `op` is known and returns the reply fields; a
    PrfaasError it raises becomes an error reply, anything else is logged and answered as an
    internal error. Nothing a client sends stops the server.
    """

    def __init__(self, path: str, handler: Handler) -> None:
        self.path = path
        self._handler = handler
        self._listener: socket.socket | None = None
        self._stopping = threading.Event()
        self._slots = threading.BoundedSemaphore(MAX_CLIENTS)

    def start(self) -> None:
        _claim_socket_path(self.path)
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(self.path)
        os.chmod(self.path, 0o600)
        listener.listen(MAX_CLIENTS)
        listener.settimeout(0.2)  # accept wakes up to notice close()
        self._listener = listener
        threading.Thread(target=self._accept_loop, name="control-accept", daemon=True).start()

    def close(self) -> None:
        self._stopping.set()
        if self._listener is not None:
            self._listener.close()
            self._listener = None
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass

    def _accept_loop(self) -> None:
        while not self._stopping.is_set():
            listener = self._listener
            if listener is None:
                return
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            if not self._slots.acquire(blocking=False):
                _send(conn, {"ok": False, "error": f"too many control clients (max {MAX_CLIENTS})",
                             "kind": "request"})
                conn.close()
                continue
            threading.Thread(target=self._serve, args=(conn,), name="control-client",
                             daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        conn.settimeout(None)
        reader = LineReader(conn)
        try:
            while not self._stopping.is_set():
                try:
                    line = reader.next_line()
                except LineTooLong as err:
                    _send(conn, error_reply(err))
                    continue
                if line is None:
                    return
                if line.strip():
                    _send(conn, self._answer(line))
        except OSError as err:
            log.debug("control client went away: %s", err)
        finally:
            conn.close()
            self._slots.release()

    def _answer(self, line: bytes) -> Reply:
        try:
            request = parse_request(line)
            return {"ok": True, **self._handler(request)}
        except PrfaasError as err:
            return error_reply(err)
        except Exception as err:  # a relay bug must not take the link down
            log.exception("control request failed")
            return {"ok": False, "error": f"internal error: {one_line(repr(err))}", "kind": "relay"}


def _send(conn: socket.socket, reply: Reply) -> None:
    conn.sendall(json.dumps(reply, separators=(",", ":")).encode() + b"\n")


def _claim_socket_path(path: str) -> None:
    """Remove a stale socket left by a dead relay; refuse a live one or a non-socket file."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(mode):
        raise TopologyError(f"control socket {path}: exists and is not a socket; remove it")
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        probe.settimeout(0.5)
        probe.connect(path)
    except OSError:
        os.unlink(path)
        return
    finally:
        probe.close()
    raise TopologyError(f"control socket {path}: another relay is serving it; "
                        "stop that relay first")


class ControlClient:
    """Request/reply over a relay's control socket; thread-safe, reconnects once if dropped."""

    def __init__(self, path: str, timeout_s: float = 5.0) -> None:
        self.path = path
        self._timeout_s = timeout_s
        self._sock: socket.socket | None = None
        self._reader: LineReader | None = None
        self._lock = threading.Lock()

    def request(self, op: str, **fields: Any) -> Reply:
        """The reply's fields for a successful request; raises LinkSpecError for a rejected spec,
        RelayUnreachable when the channel fails (after one reconnect), TopologyError for any
        other error reply."""
        line = json.dumps({"op": op, **fields}, separators=(",", ":")).encode() + b"\n"
        with self._lock:
            try:
                reply = self._exchange(line)
            except RelayUnreachable:
                reply = self._exchange(line)
        if not isinstance(reply, dict):
            raise TopologyError(f"relay {self.path}: reply is not a JSON object")
        if not reply.get("ok"):
            message = f"relay: {op}: {reply.get('error', 'failed without a reason')}"
            raise LinkSpecError(message) if reply.get("kind") == "spec" else TopologyError(message)
        return reply

    def close(self) -> None:
        with self._lock:
            self._drop()

    def _exchange(self, line: bytes) -> Any:
        """Send one line, read one; on any failure the connection is dropped, as it may be out of
        step (a late reply would answer the next request)."""
        try:
            if self._sock is None:
                sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                self._sock, self._reader = sock, LineReader(sock)
                sock.settimeout(self._timeout_s)
                sock.connect(self.path)
            assert self._reader is not None
            self._sock.sendall(line)
            answer = self._reader.next_line()
            if answer is None:
                raise RelayUnreachable(f"relay {self.path}: closed the control channel")
            return json.loads(answer)
        except (OSError, LineTooLong, json.JSONDecodeError) as err:
            self._drop()
            raise RelayUnreachable(f"relay {self.path}: control channel failed ({err})") from None
        except RelayUnreachable:
            self._drop()
            raise

    def _drop(self) -> None:
        if self._sock is not None:
            self._sock.close()
        self._sock = self._reader = None
