"""A real two-node Ray cluster started the way README.md tells users to: `ray get-auth-token
--generate`, `ray start --head`, `ray start --address HEAD` (token authentication on), as two
`--block` processes on this machine. Everything it starts lives under one fresh temp dir (its HOME,
so the token never touches ~/.ray, and both nodes' --temp-dir) and its own free ports, and teardown
ends only its own processes, by the pids it recorded: never `ray stop`, which stops every cluster
on the machine. Used by tests/emulator/test_ray_cluster.py and bench/ray_connect.py.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

STARTED_MARK = "Ray runtime started"  # what `ray start` prints once its node has joined the GCS
START_TIMEOUT_S = 90.0  # a node starts in 3-15 s on a busy 2-core machine; this only bounds a hang
STOP_TIMEOUT_S = 40.0  # a node drains for up to 30 s on SIGTERM; an idle one ends in about 1 s
OBJECT_STORE_BYTES = 128 << 20  # a sweep's rows are small; Ray's default takes 30 % of memory per node


class ClusterStartError(RuntimeError):
    """A node of the test cluster did not start; the message ends with its log's last lines."""


@dataclass(frozen=True, slots=True)
class RayStartCluster:
    """A running cluster: `address` of the head, and `env` for a driver or node of it (token mode,
    HOME holding the token, no RAY_* inherited from the caller)."""

    address: str
    env: dict[str, str]
    root: Path


def ray_executable() -> str:
    """The `ray` script of this interpreter's environment (the pinned Ray)."""
    beside = Path(sys.executable).parent / "ray"
    found = str(beside) if beside.exists() else shutil.which("ray")
    if not found:
        raise ClusterStartError(f"no `ray` command beside {sys.executable} or on PATH; install requirements.txt")
    return found


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def clean_env(home: Path) -> dict[str, str]:
    """The caller's environment less every RAY_* (a test's local Ray sets RAY_AUTH_MODE in-process),
    with HOME at `home` and token mode on, as README.md's cluster commands export it."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    env.update(HOME=str(home), RAY_AUTH_MODE="token", RAY_USAGE_STATS_ENABLED="0")
    return env


@contextmanager
def ray_start_cluster(num_cpus_per_node: int = 1) -> Iterator[RayStartCluster]:
    """A head and a worker node of `num_cpus_per_node` CPUs each, stopped and removed on exit."""
    root = Path(tempfile.mkdtemp(prefix="prf-ray-", dir="/tmp"))  # short: Ray's socket paths live under it
    env = clean_env(root)
    started: list[subprocess.Popen[bytes]] = []
    try:
        subprocess.run([ray_executable(), "get-auth-token", "--generate"], env=env, check=True,
                       capture_output=True, timeout=60)
        port = free_port()
        started.append(_start_node(root, "head", env, ["--head", "--port", str(port), "--include-dashboard=false"],
                                   num_cpus_per_node))
        started.append(_start_node(root, "worker", env, ["--address", f"127.0.0.1:{port}"], num_cpus_per_node))
        yield RayStartCluster(f"127.0.0.1:{port}", env, root)
    finally:
        _stop(started, root)
        shutil.rmtree(root, ignore_errors=True)


def _start_node(root: Path, role: str, env: dict[str, str], args: list[str],
                num_cpus: int) -> subprocess.Popen[bytes]:
    """`ray start --block` in a session of its own (so its node's processes share its process group)."""
    log_path = root / f"{role}.log"
    command = [ray_executable(), "start", "--block", *args, "--num-cpus", str(num_cpus),
               "--temp-dir", str(root / role), "--dashboard-agent-listen-port", str(free_port()),
               "--object-store-memory", str(OBJECT_STORE_BYTES), "--disable-usage-stats"]
    with log_path.open("wb") as log_file:
        proc = subprocess.Popen(command, env=env, stdout=log_file, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + START_TIMEOUT_S
    while STARTED_MARK not in log_path.read_text(errors="replace"):
        if proc.poll() is not None or time.monotonic() > deadline:
            _stop([proc], root)
            tail = "\n".join(log_path.read_text(errors="replace").splitlines()[-15:])
            raise ClusterStartError(f"`ray start` ({role}) did not start (exit {proc.returncode}):\n{tail}")
        time.sleep(0.2)
    return proc


def _stop(started: list[subprocess.Popen[bytes]], root: Path) -> None:
    """SIGTERM each `ray start --block` (it stops its node's processes), wait, then SIGKILL whatever
    is left in their process groups or names this cluster's temp dir: only processes it started."""
    for proc in reversed(started):
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
    for proc in reversed(started):
        try:
            proc.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
        _kill_group(proc.pid)
    for pid in _pids_mentioning(str(root)):
        _kill(pid)


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _pids_mentioning(text: str) -> list[int]:
    """Pids whose command line contains `text` (this cluster's unique temp dir)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if text in cmdline:
            found.append(int(entry.name))
    return found
