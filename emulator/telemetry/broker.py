"""The embedded MQTT broker (amqtt in a child process) and the parsing of `--broker` URLs.

The broker runs in its own OS process so its event loop never competes with the gateway's, and it
never outlives its parent: it stops on SIGTERM or when its stdin pipe reaches EOF. It speaks plain
MQTT on 127.0.0.1 only; TLS and authentication belong to a real broker given with `--broker`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import select
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from types import TracebackType
from typing import IO
from urllib.parse import unquote, urlsplit

from emulator.errors import TelemetryError
from emulator.paths import REPO_ROOT

log = logging.getLogger(__name__)

DEFAULT_MQTT_PORT = 1883
_PROBE_INTERVAL_S = 0.05
_MAX_PORT_TRIES = 3
READY_LINE = b"prfaas-broker ready"


@dataclass(frozen=True, slots=True)
class BrokerAddress:
    """Where a broker listens and how to log in; `url` never shows the password."""

    host: str
    port: int
    username: str | None = None
    password: str | None = None

    @property
    def url(self) -> str:
        user = f"{self.username}@" if self.username else ""
        return f"mqtt://{user}{self.host}:{self.port}"


def parse_broker_url(url: str) -> BrokerAddress:
    """`mqtt://[user:pass@]host[:port]` -> BrokerAddress (port 1883 when absent)."""
    try:
        parts = urlsplit(url.strip())
        port = parts.port
    except ValueError as err:
        raise TelemetryError(f"broker: {url!r} is not a valid URL ({err}); "
                             "use mqtt://host:port") from None
    if parts.scheme != "mqtt":
        raise TelemetryError(f"broker: {url!r} has scheme {parts.scheme or 'none'!r}; use "
                             "mqtt://host:port (TLS and websockets are not supported)")
    if not parts.hostname:
        raise TelemetryError(f"broker: {url!r} names no host; use mqtt://host:port")
    if parts.path not in ("", "/") or parts.query or parts.fragment:
        raise TelemetryError(f"broker: {url!r} has a path or query; use mqtt://host:port only")
    if port == 0:
        raise TelemetryError(f"broker: {url!r} has port 0; use the port the broker listens on")
    if parts.password is not None and not parts.username:
        raise TelemetryError(f"broker: {url!r} has a password but no user; "
                             "use mqtt://user:pass@host:port")
    return BrokerAddress(
        host=parts.hostname,
        port=port or DEFAULT_MQTT_PORT,
        username=unquote(parts.username) if parts.username else None,
        password=unquote(parts.password) if parts.password is not None else None,
    )


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port free right now; the caller must cope with losing it to someone else."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


class EmbeddedBroker:
    """An amqtt broker child process on 127.0.0.1; a context manager that always reaps it."""

    def __init__(self, port: int = 0, host: str = "127.0.0.1",
                 start_timeout_s: float = 15.0) -> None:
        self.host = host
        self.port = port
        self.start_timeout_s = start_timeout_s
        self._proc: subprocess.Popen[bytes] | None = None
        self._stderr: IO[bytes] | None = None

    @property
    def url(self) -> str:
        return f"mqtt://{self.host}:{self.port}"

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def start(self) -> EmbeddedBroker:
        """Start the child and wait until it accepts TCP connections; TelemetryError otherwise."""
        if self._proc is not None:
            return self
        is_port_picked = self.port == 0
        for attempt in range(1, _MAX_PORT_TRIES + 1):
            if is_port_picked:
                self.port = free_port(self.host)
            self._spawn()
            try:
                self._wait_accepting()
                log.info("embedded MQTT broker pid %d listening on %s", self.pid, self.url)
                return self
            except TelemetryError as err:
                exited = self._proc is not None and self._proc.poll() is not None
                self.stop()
                # A picked port can be taken between free_port() and the child's bind: try another.
                if not (is_port_picked and exited and attempt < _MAX_PORT_TRIES):
                    raise err
                log.debug("embedded broker could not bind %d; trying another port", self.port)
        raise AssertionError("unreachable: the loop returns or raises")

    def stop(self, grace_s: float = 3.0) -> None:
        """Ask the child to stop (stdin EOF + SIGTERM), kill it after `grace_s`, reap it.

        It blocks for up to `grace_s`: from an event loop, call it via `asyncio.to_thread`.
        """
        proc, self._proc = self._proc, None
        if proc is not None:
            for pipe in (proc.stdin, proc.stdout):
                if pipe is not None:
                    pipe.close()
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(grace_s)
                except subprocess.TimeoutExpired:
                    log.warning("embedded broker pid %d ignored SIGTERM; killing it", proc.pid)
                    proc.kill()
                    proc.wait()
        if self._stderr is not None:
            self._stderr.close()
            self._stderr = None

    def __enter__(self) -> EmbeddedBroker:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    def _spawn(self) -> None:
        self._stderr = tempfile.TemporaryFile()
        command = [sys.executable, "-m", "emulator.telemetry.broker",
                   "--host", self.host, "--port", str(self.port)]
        # Own session: a Ctrl-C reaches the parent, which then stops the broker in order.
        self._proc = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                      stderr=self._stderr, cwd=REPO_ROOT,
                                      start_new_session=True)

    def _wait_accepting(self) -> None:
        """Wait for the child's "ready" line (it bound the port), then for a TCP accept.

        A bare TCP probe is not enough: someone else listening on the port would answer it.
        """
        assert self._proc is not None and self._proc.stdout is not None
        deadline = time.monotonic() + self.start_timeout_s
        is_ready = False
        while time.monotonic() < deadline:
            if not is_ready:
                readable, _, _ = select.select([self._proc.stdout], [], [], _PROBE_INTERVAL_S)
                line = self._proc.stdout.readline() if readable else None
                is_ready = line is not None and line.strip() == READY_LINE
                if line == b"":  # EOF: the child is exiting; give it a moment to say why
                    with contextlib.suppress(subprocess.TimeoutExpired):
                        self._proc.wait(max(deadline - time.monotonic(), 0.0))
            if self._proc.poll() is not None:
                raise TelemetryError(f"embedded broker: exited with code {self._proc.returncode} "
                                     f"before listening on {self.url}: {self._stderr_tail()}")
            if is_ready and _is_accepting(self.host, self.port):
                return
        raise TelemetryError(f"embedded broker: not accepting on {self.url} after "
                             f"{self.start_timeout_s:g} s; raise start_timeout_s or pass "
                             "--broker mqtt://host:port to use a running broker")

    def _stderr_tail(self) -> str:
        if self._stderr is None:
            return "(no output)"
        self._stderr.seek(0)
        lines = self._stderr.read().decode(errors="replace").strip().splitlines()
        return lines[-1] if lines else "(no output)"


def _is_accepting(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False


def broker_config(host: str, port: int) -> dict:
    """amqtt 0.12's config: one TCP listener, anonymous logins, no $SYS or packet-log plugins."""
    return {
        "listeners": {"default": {"type": "tcp", "bind": f"{host}:{port}", "max_connections": 0}},
        "plugins": {"amqtt.plugins.authentication.AnonymousAuthPlugin": {"allow_anonymous": True}},
    }


async def serve(host: str, port: int) -> None:
    """Run the broker until SIGTERM/SIGINT or EOF on stdin (the parent went away)."""
    from amqtt.broker import Broker  # imported here: only the child process needs amqtt

    loop = asyncio.get_running_loop()
    stopping = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stopping.set)

    stdin_fd = sys.stdin.fileno()

    def on_stdin() -> None:
        # The parent never writes: readable means EOF (it closed the pipe or died).
        if not os.read(stdin_fd, 4096):
            loop.remove_reader(stdin_fd)
            stopping.set()

    loop.add_reader(stdin_fd, on_stdin)
    broker = Broker(broker_config(host, port))
    await broker.start()
    # The one line the parent waits for; stdout carries nothing else.
    sys.stdout.buffer.write(READY_LINE + b"\n")
    sys.stdout.buffer.flush()
    await stopping.wait()
    await broker.shutdown()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m emulator.telemetry.broker",
                                     description="The embedded MQTT broker (amqtt).")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--amqtt-log-level", default="CRITICAL",
                        help="amqtt's own log level on stderr (DEBUG to see every packet)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    # amqtt logs every connection and a dropped probe socket as errors: keep only the fatal ones.
    for name in ("amqtt", "transitions"):
        logging.getLogger(name).setLevel(args.amqtt_log_level.upper())
    try:
        asyncio.run(serve(args.host, args.port))
    except Exception as err:  # noqa: BLE001 - the child reports any start failure as one line
        log.error("%s", err)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
