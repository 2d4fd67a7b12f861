"""Joining an existing Ray cluster by address: a check that answers in seconds where `ray.init`
retries for 20 s and then blames the address, and names the cause in one line (nothing listening,
not a Ray head, token not sent, missing or refused, another Ray or Python). It starts nothing and
changes no cluster; `ray.init` stays the caller's. Token authentication is Ray's own (RAY_AUTH_MODE,
RAY_AUTH_TOKEN, RAY_AUTH_TOKEN_PATH, ~/.ray/auth_token; see TOKEN_DOCS); this module only reads it.

Uses Ray internals pinned by requirements.txt (ray==2.60.0): the GCS client with a deadline, the
token loader and the cluster's version record; tests/emulator/test_ray_cluster.py breaks on a bump.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import sys
import tempfile
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

from emulator.errors import PrfaasError

log = logging.getLogger(__name__)
TCP_CONNECT_TIMEOUT_S = 1.5  # a head on another continent answers a SYN well within this
GRPC_HELLO_TIMEOUT_S = 1.0  # a gRPC server sends its SETTINGS one round trip after the connection
GCS_TIMEOUT_S = 2.0  # the GCS answers a connected, authenticated client in milliseconds
TOKEN_DOCS = "https://docs.ray.io/en/latest/ray-security/token-auth.html"
HTTP2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"  # RFC 9113 section 3.4
HTTP2_EMPTY_SETTINGS = bytes((0, 0, 0, 4, 0, 0, 0, 0, 0))  # length 0, type SETTINGS, no flags, stream 0
HTTP2_SETTINGS_TYPE = 4
HEAD_TOKEN_HINT = "`ray get-auth-token` on the head prints it; put it in ~/.ray/auth_token or RAY_AUTH_TOKEN"


class RayUnavailable(PrfaasError):
    """Ray cannot start here, or the cluster at the given address cannot be joined."""


class Problem(Enum):
    """Why a cluster cannot be joined; each has its own fix in the message."""

    BAD_ADDRESS = "bad_address"
    NO_LOCAL_CLUSTER = "no_local_cluster"
    NOT_LISTENING = "not_listening"
    NOT_RAY = "not_ray"
    TOKEN_NOT_SENT = "token_not_sent"
    TOKEN_MISSING = "token_missing"
    TOKEN_REFUSED = "token_refused"
    VERSION_MISMATCH = "version_mismatch"


class ClusterUnreachable(RayUnavailable):
    """A cluster that cannot be joined, with the cause as a `Problem` (the message says the fix)."""

    def __init__(self, problem: Problem, message: str) -> None:
        super().__init__(message)
        self.problem = problem


@dataclass(frozen=True, slots=True)
class ClusterInfo:
    """What the check found at `address` (host:port of the head's GCS)."""

    address: str
    ray_version: str | None  # None: the head recorded no versions (an old or unusual start)
    python_version: str | None
    num_alive_nodes: int


@dataclass(frozen=True, slots=True)
class TokenSetup:
    """This process's side of token authentication, as Ray will use it."""

    is_token_mode: bool  # RAY_AUTH_MODE=token (Ray sends a token only then)
    mode_value: str | None  # RAY_AUTH_MODE as set, None when unset
    source: str | None  # where the token comes from, in Ray's order; None when there is none


MAX_ADDRESS_CHARS = 300  # a host name is at most 253 characters, a port 5 digits


def parse_address(address: str) -> tuple[str, int]:
    """`host:port` -> (host, port); anything else is refused with the form to use."""
    if len(address) > MAX_ADDRESS_CHARS:
        raise ClusterUnreachable(Problem.BAD_ADDRESS, f"--ray {address[:40]}...: {len(address)} characters, over "
                                 f"{MAX_ADDRESS_CHARS}; give the head's address as HOST:PORT (e.g. 10.0.0.5:6379)")
    host, sep, port_text = address.strip().rpartition(":")
    if address.startswith("ray://"):
        raise ClusterUnreachable(Problem.BAD_ADDRESS, f"--ray {address}: Ray Client addresses need grpcio, which "
                                 "requirements.txt does not install; give the head's GCS address, HOST:6379")
    port_ok = port_text.isascii() and port_text.isdigit() and len(port_text) <= 5 and 1 <= int(port_text) <= 65535
    if not sep or not host or not port_ok:
        raise ClusterUnreachable(Problem.BAD_ADDRESS, f"--ray {address}: not HOST:PORT; give the head's address "
                                 "as `ray start --head` printed it (e.g. 10.0.0.5:6379), or `auto` on a cluster node")
    return host.strip("[]"), int(port_text)


def token_setup() -> TokenSetup:
    """Read the auth mode and the token's source the way Ray does: RAY_AUTH_TOKEN, then the file at
    RAY_AUTH_TOKEN_PATH (Ray aborts the process on an unreadable one, so it is refused here first),
    then ~/.ray/auth_token."""
    from ray._raylet import AuthenticationMode, get_authentication_mode

    mode_value = os.environ.get("RAY_AUTH_MODE")
    is_token_mode = get_authentication_mode() == AuthenticationMode.TOKEN
    if os.environ.get("RAY_AUTH_TOKEN", "").strip():
        return TokenSetup(is_token_mode, mode_value, "RAY_AUTH_TOKEN")
    path_text = os.environ.get("RAY_AUTH_TOKEN_PATH")
    if path_text:
        if not _is_nonempty_file(Path(path_text)):
            raise ClusterUnreachable(Problem.TOKEN_MISSING, f"RAY_AUTH_TOKEN_PATH={path_text}: not a readable, "
                                     f"non-empty file; point it at the cluster's token ({HEAD_TOKEN_HINT})")
        return TokenSetup(is_token_mode, mode_value, f"RAY_AUTH_TOKEN_PATH={path_text}")
    default = Path.home() / ".ray" / "auth_token"
    return TokenSetup(is_token_mode, mode_value, str(default) if _is_nonempty_file(default) else None)


def _is_nonempty_file(path: Path) -> bool:
    try:
        return path.is_file() and path.stat().st_size > 0 and os.access(path, os.R_OK)
    except OSError:
        return False


def resolve_address(address: str) -> str:
    """`auto` -> the cluster started on this machine (Ray's record of it); any other address is
    parsed and returned as given."""
    if address.strip() != "auto":
        parse_address(address)
        return address.strip()
    from ray._private.services import canonicalize_bootstrap_address

    try:
        found = canonicalize_bootstrap_address("auto")
    except (ConnectionError, ValueError):
        found = None
    if not found:
        raise ClusterUnreachable(Problem.NO_LOCAL_CLUSTER, "--ray auto: no Ray cluster was started on this "
                                 "machine; start one (`ray start --head`) or give the head's HOST:PORT")
    return found


def check_cluster(address: str) -> ClusterInfo:
    """Join nothing, just ask: is a Ray head at `address`, does it take this process's token, does it
    run this Ray and Python? Returns what it found, or raises ClusterUnreachable within
    TCP_CONNECT_TIMEOUT_S + GRPC_HELLO_TIMEOUT_S + GCS_TIMEOUT_S (4.5 s) plus Ray's import."""
    if address.strip() == "auto":  # ray.init(address="auto") turns token mode on when a token exists
        from ray._private.authentication.authentication_token_setup import (
            maybe_enable_token_auth_if_token_available,
        )

        maybe_enable_token_auth_if_token_available(warn_if_disabled=False)
    resolved = resolve_address(address)  # this machine's own set-up first: no network needed to find it wrong
    tokens = token_setup()
    if tokens.is_token_mode and tokens.source is None:
        raise ClusterUnreachable(Problem.TOKEN_MISSING, f"--ray {address}: RAY_AUTH_MODE=token but this machine "
                                 "has no token (RAY_AUTH_TOKEN, RAY_AUTH_TOKEN_PATH, ~/.ray/auth_token); "
                                 f"{HEAD_TOKEN_HINT}")
    host, port = parse_address(resolved)
    _check_listening(address, host, port)
    metadata, num_alive = _ask_gcs(address, resolved, tokens)
    mine = _my_versions()
    problem = version_mismatch(metadata, mine)
    if problem:
        raise ClusterUnreachable(Problem.VERSION_MISMATCH, f"--ray {address}: {problem}")
    return ClusterInfo(resolved, metadata.get("ray_version"), metadata.get("python_version"), num_alive)


def _check_listening(address: str, host: str, port: int) -> None:
    """A TCP connection, then the HTTP/2 preface every gRPC server (the GCS) answers with SETTINGS
    at once: Ray's own client would wait 5 s twice before it gives up on a port that is not a head."""
    try:
        with socket.create_connection((host, port), timeout=TCP_CONNECT_TIMEOUT_S) as sock:
            sock.settimeout(GRPC_HELLO_TIMEOUT_S)
            sock.sendall(HTTP2_PREFACE + HTTP2_EMPTY_SETTINGS)
            reply = _read_up_to(sock, len(HTTP2_EMPTY_SETTINGS))
    except socket.gaierror as err:
        cause = f"the host name does not resolve ({err.strerror})"
    except ConnectionRefusedError:
        cause = "nothing is listening there (connection refused)"
    except TimeoutError:
        cause = f"no answer within {TCP_CONNECT_TIMEOUT_S:g} s (a firewall, or the wrong host)"
    except OSError as err:
        cause = f"cannot connect ({err.strerror or err})"
    else:
        if len(reply) == len(HTTP2_EMPTY_SETTINGS) and reply[3] == HTTP2_SETTINGS_TYPE:
            return
        raise ClusterUnreachable(Problem.NOT_RAY, f"--ray {address}: something listens there but it is not a Ray "
                                 "head (no gRPC answer); give the port `ray start --head` printed (6379 unless "
                                 "--port was given)")
    raise ClusterUnreachable(Problem.NOT_LISTENING, f"--ray {address}: {cause}; start the head with "
                             "`ray start --head --port PORT` there, or fix the address")


def _read_up_to(sock: socket.socket, num_bytes: int) -> bytes:
    """At most `num_bytes`, until the peer stops sending or closes; b"" when it says nothing in time."""
    data = b""
    try:
        while len(data) < num_bytes:
            chunk = sock.recv(num_bytes - len(data))
            if not chunk:
                break
            data += chunk
    except TimeoutError:
        pass
    return data


def _ask_gcs(address: str, resolved: str, tokens: TokenSetup) -> tuple[dict[str, str], int]:
    """The head's version record and its number of alive nodes, read with a deadline."""
    import json

    from ray._raylet import InnerGcsClient
    from ray.core.generated.gcs_pb2 import GcsNodeInfo
    from ray.exceptions import AuthenticationError, RayError

    timeout_ms = int(GCS_TIMEOUT_S * 1000)
    try:
        with _native_stderr_to_log():  # the GCS client's C++ retry warnings; our one line says it
            client = InnerGcsClient.standalone(resolved, None, timeout_ms)
            raw = client.internal_kv_get(b"CLUSTER_METADATA", b"cluster", GCS_TIMEOUT_S)
            nodes = client.get_all_node_info(timeout=GCS_TIMEOUT_S)
    except AuthenticationError:
        raise ClusterUnreachable(*_token_refusal(address, tokens)) from None
    except RayError as err:
        first = (str(err).splitlines() or [type(err).__name__])[0]
        raise ClusterUnreachable(Problem.NOT_RAY, f"--ray {address}: a gRPC server answers there but no Ray "
                                 f"head ({first}); give the port `ray start --head` printed (6379 unless --port "
                                 "was given)") from None
    try:
        metadata = json.loads(raw) if raw else {}
    except ValueError:
        metadata = {}
    num_alive = sum(1 for node in nodes.values() if node.state == GcsNodeInfo.ALIVE)
    return (metadata if isinstance(metadata, dict) else {}), num_alive


def _token_refusal(address: str, tokens: TokenSetup) -> tuple[Problem, str]:
    if not tokens.is_token_mode:
        mode = f"RAY_AUTH_MODE={tokens.mode_value}" if tokens.mode_value else "RAY_AUTH_MODE is unset"
        return Problem.TOKEN_NOT_SENT, (f"--ray {address}: the cluster requires a token and this process sends "
                                        f"none ({mode}); export RAY_AUTH_MODE=token ({HEAD_TOKEN_HINT})")
    return Problem.TOKEN_REFUSED, (f"--ray {address}: the cluster refused this machine's token (from "
                                   f"{tokens.source}); use the head's token ({HEAD_TOKEN_HINT})")


def version_mismatch(cluster: Mapping[str, object], mine: tuple[str, str], python_match_level: str | None = None,
                     ) -> str | None:
    """Why a driver of Ray/Python `mine` cannot join a cluster that recorded `cluster` (Ray's
    CLUSTER_METADATA), by Ray's own rule: the same Ray, and the same Python to the patch level
    (or the minor one, with RAY_DEFAULT_PYTHON_VERSION_MATCH_LEVEL=minor); None when it can."""
    theirs = (cluster.get("ray_version"), cluster.get("python_version"))
    if not all(isinstance(v, str) for v in theirs):
        return None
    level = python_match_level or os.environ.get("RAY_DEFAULT_PYTHON_VERSION_MATCH_LEVEL", "patch")
    num_parts = 2 if level == "minor" else 3
    same_python = str(theirs[1]).split(".")[:num_parts] == mine[1].split(".")[:num_parts]
    if theirs[0] == mine[0] and same_python:
        return None
    return (f"the cluster runs Ray {theirs[0]} on Python {theirs[1]}, this process Ray {mine[0]} on Python "
            f"{mine[1]}; run the same versions on every node and the driver (pip install ray=={theirs[0]})")


def _my_versions() -> tuple[str, str]:
    import ray

    return ray.__version__, ".".join(map(str, sys.version_info[:3]))


@contextmanager
def _native_stderr_to_log() -> Iterator[None]:
    """Send what native code writes to fd 2 meanwhile to this module's debug log. Process-wide, so
    only around a call of at most a few seconds, at set-up, before anything else runs."""
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as sink:
        os.dup2(sink.fileno(), 2)
        try:
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            sink.seek(0)
            for line in sink.read(64 * 1024).decode(errors="replace").splitlines():
                log.debug("ray: %s", line)


@contextmanager
def signal_handlers_kept() -> Iterator[None]:
    """Put back the SIGTERM/SIGINT handlers found on entry. A Ray driver installs a SIGTERM handler
    that raises SystemExit and leaves it behind after shutdown; every helper this process forks
    later (pyroute2 forks one per namespace it enters, and ends it with SIGTERM) would then unwind
    its copy of our stack and run on as a second copy of the program instead of dying."""
    if threading.current_thread() is not threading.main_thread():
        yield  # handlers can be neither read reliably nor set off the main thread; Ray sets none there
        return
    found = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for sig, handler in found.items():
            signal.signal(sig, handler if handler is not None else signal.SIG_DFL)
