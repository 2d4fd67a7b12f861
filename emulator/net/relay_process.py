"""A relay as its own OS process: started and stopped by a backend, never outliving its parent.

A relay shapes traffic in Python, so it runs in a process of its own: as a thread of the emulator
it would fight the GIL with the very traffic it paces. Parent side: `RelayProcess` starts
`python -m <module>`, waits for its one JSON "ready" line on stdout, then talks over the control
socket. Child side: `RelayLifecycle` prints that line, turns SIGTERM/SIGINT into a stop, and stops
when the parent dies (its stdin pipe reaches EOF, or it is re-parented). PR_SET_PDEATHSIG is not
used: it fires when the parent *thread* that spawned the relay exits, e.g. an executor thread.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import logging
import os
import select
import signal
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, NoReturn

from emulator.errors import TopologyError
from emulator.net import ledger
from emulator.net.relay_control import ControlClient, RelayUnreachable, Reply
from emulator.paths import REPO_ROOT, relay_log_level

log = logging.getLogger(__name__)

EXIT_STARTUP_FAILED = 2
MAX_SOCKET_PATH = 107  # sun_path holds 108 bytes with the terminating NUL
_PR_SET_TIMERSLACK = 29
STOP_REQUEST_TIMEOUT_S = 1.0


def default_run_dir(run_id: str) -> Path:
    """The run's directory, by the cleanup ledger's convention: relay sockets and logs go there."""
    return ledger.run_dir(run_id)


class RelayProcess:
    """One running relay: its pid, control socket and log (its stderr) inside `run_dir`."""

    def __init__(self, module: str, name: str, args: list[str], run_dir: Path,
                 start_timeout_s: float = 10.0) -> None:
        self.name = name
        self.control_path = str(run_dir / f"{name}.sock")
        if len(self.control_path.encode()) > MAX_SOCKET_PATH:
            raise TopologyError(f"relay {name}: control socket path {self.control_path} is longer "
                                f"than {MAX_SOCKET_PATH} bytes; use a shorter run directory")
        self.log_path = run_dir / f"{name}.log"
        command = [sys.executable, "-m", module, "--control", self.control_path, *args]
        with open(self.log_path, "ab") as log_file:
            # Own session: a Ctrl-C in the terminal reaches the parent, which then stops the
            # relay in order, instead of killing the link under a live run.
            self._proc = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                          stderr=log_file, cwd=REPO_ROOT,
                                          start_new_session=True)
        self.pid = self._proc.pid
        self.client = ControlClient(self.control_path)
        self._is_ready = False
        try:
            self.info = self._wait_ready(start_timeout_s)
        except BaseException:
            self.stop()
            raise
        self._is_ready = True

    def request(self, op: str, **fields: Any) -> Reply:
        """One control request; a relay found dead on the way is reported as such."""
        try:
            return self.client.request(op, **fields)
        except RelayUnreachable:
            status = self.wait_exit(0.5)
            if status is None:
                raise
            raise TopologyError(f"relay {self.name} (pid {self.pid}) died with status {status}; "
                                f"see {self.log_path}") from None

    def is_alive(self) -> bool:
        return self._proc.poll() is None

    def wait_exit(self, timeout_s: float) -> int | None:
        """The relay's exit status once it has exited within `timeout_s`, else None."""
        self._wait(timeout_s)
        return self._proc.poll()

    def stop(self, timeout_s: float = 3.0) -> None:
        """Ask the relay to stop, then SIGTERM, then SIGKILL; idempotent, tolerates a dead relay."""
        if self._is_ready and self._proc.poll() is None:
            # A client of its own with a short timeout: a relay too busy to answer at once is
            # signalled instead, and the run's teardown never waits out the 5 s request timeout.
            client = ControlClient(self.control_path, timeout_s=min(STOP_REQUEST_TIMEOUT_S, timeout_s))
            try:
                client.request("stop")
                self._wait(timeout_s)
            except TopologyError as err:
                log.debug("relay %s: stop request failed (%s); signalling", self.name, err)
            finally:
                client.close()
        self._is_ready = False
        self.client.close()
        for sig in (signal.SIGTERM, signal.SIGKILL):
            if self._proc.poll() is None:
                self._proc.send_signal(sig)
                self._wait(timeout_s)
        if self._proc.poll() is None:
            log.warning("relay %s (pid %d) survived SIGKILL for %.0f s", self.name, self.pid,
                        timeout_s)
        for pipe in (self._proc.stdin, self._proc.stdout):
            if pipe is not None:
                pipe.close()
        try:
            os.unlink(self.control_path)
        except FileNotFoundError:
            pass

    def _wait(self, timeout_s: float) -> None:
        try:
            self._proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            pass

    def _wait_ready(self, timeout_s: float) -> dict[str, Any]:
        assert self._proc.stdout is not None
        deadline = time.monotonic() + timeout_s
        line = b""
        while not line.endswith(b"\n"):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TopologyError(f"relay {self.name}: not ready after {timeout_s:.0f} s; "
                                    f"see {self.log_path}")
            readable, _, _ = select.select([self._proc.stdout], [], [], remaining)
            if readable:
                chunk = os.read(self._proc.stdout.fileno(), 4096)
                if not chunk:
                    self._proc.wait(timeout_s)
                    raise TopologyError(f"relay {self.name}: {self._last_error_line()}")
                line += chunk
                if len(line) > 65536:
                    raise TopologyError(f"relay {self.name}: ready line too long")
        try:
            info = json.loads(line)
        except json.JSONDecodeError:
            raise TopologyError(f"relay {self.name}: bad ready line {line[:200]!r}") from None
        if not isinstance(info, dict) or info.get("ready") is not True:
            raise TopologyError(f"relay {self.name}: bad ready line {line[:200]!r}")
        return info

    def _last_error_line(self) -> str:
        try:
            lines = self.log_path.read_text(errors="replace").strip().splitlines()
        except OSError:
            lines = []
        last = lines[-1] if lines else "no message"
        return f"exited with {self._proc.returncode} before it was ready: {last}"


class RelayLifecycle:
    """The relay's side: readiness, signals and parent death all end in one `stop` event."""

    def __init__(self) -> None:
        self.stop = threading.Event()
        self.started_at = time.monotonic()
        self._parent = os.getppid()

    def install_signal_handlers(self, loop: Any = None) -> None:
        """SIGTERM/SIGINT set `stop`; pass the asyncio loop when one runs the main thread."""
        for sig in (signal.SIGTERM, signal.SIGINT):
            if loop is not None:
                loop.add_signal_handler(sig, self.stop.set)
            else:
                signal.signal(sig, lambda *_: self.stop.set())

    def watch_parent(self, on_exit: Any = None) -> None:
        """Set `stop` (and call `on_exit`) once stdin hits EOF or the process is re-parented."""

        stdin = sys.stdin.fileno()
        # The parent's pipe on stdin reads EOF once every copy of its write end is closed, i.e.
        # when the parent dies. Without a pipe (run by hand) only re-parenting is watched.
        is_pipe = stat.S_ISFIFO(os.fstat(stdin).st_mode)

        def watch() -> None:
            while not self.stop.is_set():
                if is_pipe:
                    readable, _, _ = select.select([stdin], [], [], 0.5)
                    if readable and not os.read(stdin, 4096):
                        break
                else:
                    time.sleep(0.5)
                if os.getppid() != self._parent:
                    break
            if not self.stop.is_set():
                log.warning("parent %d is gone; relay stopping", self._parent)
                self.stop.set()
                if on_exit is not None:
                    on_exit()

        threading.Thread(target=watch, name="parent-watch", daemon=True).start()

    def announce_ready(self, **info: Any) -> None:
        """The one line the parent waits for; stdout is closed for everything else afterwards."""
        sys.stdout.write(json.dumps({"ready": True, "pid": os.getpid(), **info}) + "\n")
        sys.stdout.flush()
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)

    def uptime_s(self) -> float:
        return time.monotonic() - self.started_at


def startup_failed(message: str) -> NoReturn:
    """Report a start-up error the way the parent reads it: one line on stderr, exit 2."""
    sys.stderr.write(" ".join(message.split("\n")) + "\n")
    sys.stderr.flush()
    sys.exit(EXIT_STARTUP_FAILED)


def set_timer_slack(ns: int = 1) -> None:
    """Shrink this process's timer slack (default 50 us) so sleeps end when asked."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_TIMERSLACK, ctypes.c_ulong(ns), 0, 0, 0)
    except (OSError, AttributeError) as err:
        log.debug("timer slack unchanged: %s", err)


def parse_relay_args(prog: str, argv: list[str] | None, extra: tuple[str, ...] = ()) -> argparse.Namespace:
    """The command line every relay takes (--control, --spec, --seed, plus `extra` JSON options);
    also sets up the relay's logging and timer slack, the first thing each relay does."""
    parser = argparse.ArgumentParser(prog=prog)
    parser.add_argument("--control", required=True, help="Unix socket path for control requests")
    for name in extra:
        parser.add_argument(f"--{name}", required=True, help=f"{name} as JSON")
    parser.add_argument("--spec", required=True, help="LinkSpec as JSON")
    parser.add_argument("--seed", type=int, default=None, help="seed for loss and jitter draws")
    args = parser.parse_args(argv)
    configure_relay_logging()
    set_timer_slack()
    return args


def configure_relay_logging() -> None:
    """Relays log to stderr, which the parent points at the relay's log file."""
    logging.basicConfig(level=relay_log_level(), stream=sys.stderr,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
