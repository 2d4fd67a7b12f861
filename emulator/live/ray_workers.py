"""Live workers on Ray nodes (issue 30): a `WorkerHost` actor per worker owns its one
`python -m emulator.worker` process on the node the placement chose, and `RayWorkerProcesses`
offers the launcher's interface over them, so the session and the run loops use either unchanged.

The run's secret reaches the actor as a method argument (through Ray, never argv); the settings
file (0600) and the worker's log live in a private temp dir on the node, the log copied back to
the run's log dir when the run closes. The worker dies with its actor (PR_SET_PDEATHSIG), so a
lost node loses its worker, which the gateway sees as a closed control connection. Ray is imported
only when a run uses it.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from emulator.control.types import Cluster
from emulator.live.launcher import WorkerPlan, WorkerProcesses, worker_env
from emulator.live.ray_placement import RayNode
from emulator.net.ledger import process_start_time
from emulator.paths import REPO_ROOT
from emulator.wire.worker_settings import WorkerSettings

log = logging.getLogger(__name__)
PR_SET_PDEATHSIG = 1  # prctl(2)
CALL_TIMEOUT_S = 1.0  # an actor on a live node answers in milliseconds; the loop waits this long at most
START_TIMEOUT_S = 60.0  # the actor's process starts on its node first (seconds on a busy machine)
LOST_EXIT_CODE = -signal.SIGKILL  # a worker whose actor (or node) is gone: as if killed
MAX_LOG_TAIL_BYTES = 256 * 1024  # what comes back of a worker's log when the run closes
HOST_DIR_PREFIX = "prf-worker-host-"  # a WorkerHost's private dir in the node's temp dir
OWNER_FILE = "owner"  # in it: the actor's pid and start time (ledger.process_start_time)


def _die_with_parent(parent_pid: int) -> None:
    """In the worker, before exec: SIGKILL when the actor that started it dies; exit now if it
    already has (the race between fork and prctl)."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent_pid:
        os._exit(1)
    # Ray runs actors at nice 15, and the worker adds its own WORKER_NICE on top (19, the floor):
    # other load on the node then starves it far more than a worker started on one host (nice 10),
    # so TTFT under other load moved far more across hosts than on one (issue 30). Back to the node's nice 0
    # where allowed (root or CAP_SYS_NICE); otherwise it stays as Ray left it.
    try:
        os.setpriority(os.PRIO_PROCESS, 0, 0)
    except PermissionError:
        pass


def _owner_of(pid: int) -> str:
    return f"{pid} {process_start_time(pid)}"


def sweep_host_dirs(root: Path | None = None) -> list[Path]:
    """Remove the private dirs of worker hosts whose actor process is gone (an actor killed, or its
    node's raylet, never runs `close`): this user's, 0700, with an OWNER_FILE naming a pid that no
    longer runs with that start time. Another live host's dir is never touched. The dirs removed."""
    removed = []
    for path in (root or Path(tempfile.gettempdir())).glob(f"{HOST_DIR_PREFIX}*"):
        try:
            info = path.lstat()
            if not path.is_dir() or path.is_symlink() or info.st_uid != os.getuid() or info.st_mode & 0o077:
                continue
            pid_text, _, start = (path / OWNER_FILE).read_text()[:64].partition(" ")
        except (OSError, UnicodeDecodeError):
            continue
        if pid_text.isdigit() and _owner_of(int(pid_text)) != f"{pid_text} {start}":
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
    return removed


class WorkerHost:
    """A Ray actor (made remote in RayWorkerProcesses) owning one worker process on its node.

    Sync methods run on the actor's one execution thread, which is also the thread that starts the
    process: PR_SET_PDEATHSIG fires when that thread ends, so it must outlive the worker."""

    def __init__(self, spawn_name: str) -> None:
        self.spawn_name = spawn_name
        sweep_host_dirs()
        self.dir = Path(tempfile.mkdtemp(prefix=HOST_DIR_PREFIX))  # 0700: settings and log
        (self.dir / OWNER_FILE).write_text(_owner_of(os.getpid()))
        self.proc: subprocess.Popen | None = None

    def where(self) -> tuple[str, str]:
        """This node's Ray id and address."""
        import ray

        return ray.get_runtime_context().get_node_id(), ray.util.get_node_ip_address()

    def start(self, settings_json: str, env_add: Mapping[str, str]) -> int:
        """Start the worker with `settings_json` in its 0600 file and `env_add` over this node's
        environment; returns its pid. Refused while the previous one runs."""
        if self.proc is not None and self.proc.poll() is None:
            raise RuntimeError(f"worker {self.spawn_name} is still running (pid {self.proc.pid})")
        settings = WorkerSettings.model_validate_json(settings_json)
        path = settings.write(self.dir / f"{self.spawn_name}.settings.json")
        command = [sys.executable, "-m", "emulator.worker", "--node", self.spawn_name, "--settings", str(path)]
        me = os.getpid()
        with open(self.dir / f"{self.spawn_name}.log", "ab") as log_file:
            self.proc = subprocess.Popen(command, cwd=REPO_ROOT, env={**os.environ, **env_add}, stdout=log_file,
                                         stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                         preexec_fn=lambda: _die_with_parent(me))
        return self.proc.pid

    def poll(self) -> int | None:
        return None if self.proc is None else self.proc.poll()

    def send_signal(self, signum: int) -> bool:
        """Signal the running worker; False when there is none."""
        if self.proc is None or self.proc.poll() is not None:
            return False
        self.proc.send_signal(signum)
        return True

    def log_tail(self, max_bytes: int = MAX_LOG_TAIL_BYTES) -> bytes:
        path = self.dir / f"{self.spawn_name}.log"
        if not path.exists():
            return b""
        with open(path, "rb") as file:
            file.seek(max(path.stat().st_size - max_bytes, 0))
            return file.read(max_bytes)

    def close(self) -> None:
        """Kill the worker if it still runs, reap it, and remove the private dir."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
        if self.proc is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(5.0)
        shutil.rmtree(self.dir, ignore_errors=True)


class RayWorkerHandle:
    """A worker on a Ray node seen as `subprocess.Popen` (launcher.WorkerProcess): a dead actor is
    a worker killed (LOST_EXIT_CODE); an actor that does not answer in time is still running."""

    def __init__(self, actor: Any, pid: int) -> None:
        self.actor, self.pid = actor, pid
        self.returncode: int | None = None

    def _call(self, method: str, *args: Any) -> Any:
        """The actor's answer; None when it does not answer within CALL_TIMEOUT_S. A dead actor
        sets the exit code."""
        import ray

        try:
            return ray.get(getattr(self.actor, method).remote(*args), timeout=CALL_TIMEOUT_S)
        except ray.exceptions.GetTimeoutError:
            return None
        except ray.exceptions.ActorUnavailableError:  # for a moment; a lost node ends as ActorDiedError
            return None
        except ray.exceptions.RayActorError:
            self.returncode = LOST_EXIT_CODE if self.returncode is None else self.returncode
            return None

    def poll(self) -> int | None:
        if self.returncode is None:
            code = self._call("poll")
            if self.returncode is None and code is not None:
                self.returncode = code
        return self.returncode

    def kill(self) -> None:
        if self.returncode is None:
            self._call("send_signal", signal.SIGKILL)

    def terminate(self) -> None:
        if self.returncode is None:
            self._call("send_signal", signal.SIGTERM)

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while (code := self.poll()) is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(f"worker pid {self.pid} on a Ray node", timeout or 0.0)
            time.sleep(0.05)
        return code


class RayWorkerProcesses(WorkerProcesses):
    """The launcher's interface over WorkerHost actors: one per worker, pinned to the node the
    placement chose (and holding one unit of its cluster's resource there), created for every plan
    at once so the nodes start them in parallel. Workers on other hosts are not in this host's
    ledger: their actor, and with it the worker, ends with the run's Ray session."""

    def __init__(self, *args: Any, hosted: Sequence[WorkerPlan], node_of: Mapping[str, RayNode],
                 resource_of_cluster: Mapping[Cluster, str], **kwargs: Any) -> None:
        import ray
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        super().__init__(*args, **kwargs)
        self.node_of = dict(node_of)
        remote_host = ray.remote(WorkerHost)
        self.actors = {plan.spawn_name: remote_host.options(
            num_cpus=0, max_restarts=0, resources={resource_of_cluster[plan.cluster]: 1},
            scheduling_strategy=NodeAffinitySchedulingStrategy(self.node_of[plan.spawn_name].node_id, soft=False),
        ).remote(plan.spawn_name) for plan in hosted}

    def _spawn(self, plan: WorkerPlan) -> RayWorkerHandle:
        """The worker started by its actor; the settings name the gateway at `gateway_host`."""
        import ray

        actor = self.actors[plan.spawn_name]
        env_add = worker_env({}, self.placement.of(plan.cluster, plan.index), self.gate.env())
        ref = actor.start.remote(self.settings(plan).model_dump_json(), env_add)
        try:
            pid = ray.get(ref, timeout=START_TIMEOUT_S)
        except ray.exceptions.RayActorError:
            log.warning("worker %s: its actor on %s is gone", plan.spawn_name, self.node_of[plan.spawn_name].label)
            handle = RayWorkerHandle(actor, -1)
            handle.returncode = LOST_EXIT_CODE
            return handle
        return RayWorkerHandle(actor, pid)

    def hosts(self) -> dict[str, dict[str, str]]:
        return {name: {"node_id": node.node_id, "ip": node.ip} for name, node in self.node_of.items()}

    def close(self) -> None:
        """Bring each worker's log back to the run's log dir, then end its actor (and so its worker).
        Every actor is asked at once: a lost node costs one CALL_TIMEOUT_S, not one per worker.
        Then the private dirs of this host's actors that died without closing go."""
        import ray

        names = list(self.actors)
        tails = answers_within([self.actors[name].log_tail.remote() for name in names], CALL_TIMEOUT_S)
        for name, tail in zip(names, tails, strict=True):
            lost = f"(log not retrieved: the actor on {self.node_of[name].label} did not answer)\n".encode()
            (self.log_dir / f"{name}.log").write_bytes(tail if isinstance(tail, bytes) else lost)
        answers_within([self.actors[name].close.remote() for name in names], CALL_TIMEOUT_S)
        for actor in self.actors.values():
            ray.kill(actor)
        sweep_host_dirs()  # a lost node's actors on this host left theirs (other hosts sweep at their next start)


def answers_within(refs: list[Any], timeout_s: float) -> list[Any]:
    """Each ref's value, the RayError it raised, or None where it did not come within `timeout_s`:
    the refs are waited for together, so a lost node costs one timeout, not one per ref."""
    import ray

    ready, _ = ray.wait(refs, num_returns=len(refs), timeout=timeout_s) if refs else ([], [])
    done = set(ready)
    values: list[Any] = []
    for ref in refs:
        try:
            values.append(ray.get(ref) if ref in done else None)
        except ray.exceptions.RayError as err:
            values.append(err)
    return values
