"""What a live run starts and must stop: the topology, the MQTT broker and one process per worker.

Everything goes into the run's ledger as it is created, so `python -m emulator net down` finds it
even after a crash. Workers live in the host namespace; their KV sockets open inside their
datacenter's namespace (the worker does that), and their control connection reaches the gateway on
127.0.0.1.
"""

from __future__ import annotations

import contextlib
import logging
import os
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from emulator.control.types import Cluster, NodeId, Role
from emulator.live.placement import DevicePlacement, Placement, device_env, plan_devices
from emulator.net.ledger import Ledger
from emulator.net.peer_uid import peer_uid
from emulator.net.topology import LOCAL, REMOTE, Topology
from emulator.paths import REPO_ROOT
from emulator.scenario import Scenario
from emulator.wire.auth import WorkerGate
from emulator.wire.worker_settings import WorkerSettings

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class WorkerPlan:
    """One worker process: its slot, first role and where its KV sockets live."""

    cluster: Cluster
    index: int
    role: Role

    @property
    def spawn_name(self) -> str:
        return str(NodeId(self.cluster, self.role, self.index))


def plan_workers(scenario: Scenario, n_p: int) -> list[WorkerPlan]:
    """Remote prefill instances, then the local slots: prefill for the first n_p, decode after."""
    remote = [WorkerPlan(Cluster.REMOTE, i, Role.PREFILL) for i in range(scenario.clusters.remote.instances)]
    local = [WorkerPlan(Cluster.LOCAL, i, Role.PREFILL if i < n_p else Role.DECODE)
             for i in range(scenario.clusters.local.instances)]
    return remote + local


# One compute thread per worker process (with WorkerSettings.threads = 1); `calibrate --machine`
# starts its probes the same way (emulator/live/machine_probes.py).
ONE_THREAD_ENV = {"OMP_NUM_THREADS": "1"}


def worker_env(parent: Mapping[str, str], placement: DevicePlacement, secret: Mapping[str, str]) -> dict[str, str]:
    """A worker's environment: the parent's, one compute thread, its device's CUDA_VISIBLE_DEVICES
    and the run's secret (in the environment, never argv: `ps` shows argv to every user)."""
    return {**parent, **ONE_THREAD_ENV, **device_env(placement, parent), **secret}


def speed_notes(scenario: Scenario) -> list[str]:
    """What the run says about emulated hardware speed: a slower cluster holds its results back;
    a faster one cannot be emulated, since the real compute does not speed up."""
    notes = []
    for name, cluster in (("remote", scenario.clusters.remote), ("local", scenario.clusters.local)):
        if cluster.speed_factor < 1:
            notes.append(f"{name} workers run at speed factor {cluster.speed_factor:g}: each result is held "
                         f"until {1 / cluster.speed_factor:.2f}x its real compute time")
        elif cluster.speed_factor > 1:
            notes.append(f"{name} speed factor {cluster.speed_factor:g} > 1 cannot be emulated live; running at 1")
    return notes


class WorkerProcess(Protocol):
    """What the run needs of one worker's process, as `subprocess.Popen` offers it (and
    ray_workers.RayWorkerHandle for a worker on a Ray node)."""

    @property
    def pid(self) -> int: ...

    @property
    def returncode(self) -> int | None: ...

    def poll(self) -> int | None: ...

    def kill(self) -> None: ...

    def terminate(self) -> None: ...

    def wait(self, timeout: float | None = None) -> int: ...


class WorkerProcesses:
    """Spawns, kills and restarts `python -m emulator.worker` processes; logs go to `log_dir`.

    Starting one is `_spawn`'s: here a child of this process, in ray_workers.py a child of an actor
    on a Ray node. Everything else (kill, restart, reaping, the stop ladder) is shared."""

    def __init__(self, scenario: Scenario, topology: Topology, gateway_port: int, log_dir: Path,
                 ledger: Ledger, placement: Placement | None = None, gateway_host: str = "127.0.0.1") -> None:
        """`placement` defaults to the scenario's on a machine without GPUs (the CPU default);
        `gateway_host` is the address the workers reach the gateway's control listener on."""
        self.scenario, self.topology, self.gateway_port = scenario, topology, gateway_port
        self.gateway_host = gateway_host
        self.placement = placement or plan_devices(scenario.clusters, visible_gpus=0)
        self.log_dir, self.ledger = log_dir, ledger
        self.plans: dict[str, WorkerPlan] = {}
        self.procs: dict[str, WorkerProcess] = {}
        # this run's secret: only workers started here can say hello; handshake slots per user
        self.gate = WorkerGate(peer_uid=peer_uid)

    def settings(self, plan: WorkerPlan) -> WorkerSettings:
        """What the scenario asks of this worker (its placement's device, its cluster's speed and
        prefix share)."""
        sc, clusters = self.scenario, self.scenario.clusters
        cluster = clusters.remote if plan.cluster is Cluster.REMOTE else clusters.local
        dc = REMOTE if plan.cluster is Cluster.REMOTE else LOCAL
        capacity = sc.prefix_cache.capacity_mib.remote if dc == REMOTE else sc.prefix_cache.capacity_mib.local
        return WorkerSettings(
            gateway_host=self.gateway_host, gateway_port=self.gateway_port,  # in the 0600 file, not argv (issue 25)
            netns=self.topology.netns(dc) or "", kv_addr=self.topology.address(dc), preset=sc.model.preset,
            size=sc.model.preset_size, seed=sc.seed, device=self.placement.of(plan.cluster, plan.index).device,
            threads=1, speed_factor=min(cluster.speed_factor, 1.0), max_batch=clusters.local.decode_max_batch,
            prefix_capacity_mib=max(1, int(capacity / max(cluster.instances, 1))),
            connections=sc.transport.connections, congestion=sc.transport.congestion)

    def command(self, plan: WorkerPlan) -> list[str]:
        """The worker's command line: its identity and the settings file written next to its log
        (readable by this user only; it names the gateway's port, which argv, shown by `ps` to every
        user, never does)."""
        path = self.settings(plan).write(self.log_dir / f"{plan.spawn_name}.settings.json")
        return [sys.executable, "-m", "emulator.worker", "--node", plan.spawn_name, "--settings", str(path)]

    def start(self, plan: WorkerPlan) -> WorkerProcess:
        self.plans[plan.spawn_name] = plan
        proc = self._spawn(plan)
        self.procs[plan.spawn_name] = proc
        return proc

    def _spawn(self, plan: WorkerPlan) -> WorkerProcess:
        """A child of this process, recorded in the run's ledger (`net down` finds it after a crash)."""
        env = worker_env(os.environ, self.placement.of(plan.cluster, plan.index), self.gate.env())
        log_path = self.log_dir / f"{plan.spawn_name}.log"
        with open(log_path, "ab") as log_file:
            proc = subprocess.Popen(self.command(plan), cwd=REPO_ROOT, env=env, stdout=log_file,
                                    stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        self.ledger.record("pid", pid=proc.pid, name=plan.spawn_name)
        return proc

    def pids(self) -> dict[str, int]:
        """Each worker's last process id (on its own host), for the record."""
        return {name: proc.pid for name, proc in self.procs.items()}

    def hosts(self) -> dict[str, dict[str, str]]:
        """Each worker's host ({node_id, ip}), for the record; empty when every worker runs on this host."""
        return {}

    def close(self) -> None:
        """Release what hosts the workers once they have stopped: nothing for children of this process."""

    def kill(self, spawn_name: str) -> bool:
        """SIGKILL, as a crash would: the worker gets no chance to report anything."""
        proc = self.procs.get(spawn_name)
        if proc is None or proc.poll() is not None:
            return False
        proc.kill()
        proc.wait(10)
        return True

    def restart(self, spawn_name: str) -> bool:
        proc, plan = self.procs.get(spawn_name), self.plans.get(spawn_name)
        if plan is None or (proc is not None and proc.poll() is None):
            return False
        self.start(plan)
        return True

    def exited(self) -> dict[str, int]:
        """Workers that are gone, with their exit codes."""
        return {name: proc.returncode for name, proc in self.procs.items() if proc.poll() is not None}

    def alive(self) -> list[str]:
        """Workers whose process has not exited (each call reaps those that have)."""
        return [name for name, proc in self.procs.items() if proc.poll() is None]

    def terminate_all(self) -> None:
        """SIGTERM to every running worker: it fails what it holds and exits 0."""
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.terminate()

    def kill_all(self) -> list[str]:
        """SIGKILL to every worker still running; returns their names (for the teardown's record)."""
        killed = []
        for name, proc in self.procs.items():
            if proc.poll() is None:
                log.warning("worker %s (pid %d) did not exit after SIGTERM; killing it", name, proc.pid)
                proc.kill()
                killed.append(f"worker {name} (pid {proc.pid})")
        return killed

    def stop_all(self, grace_s: float = 10.0) -> list[str]:
        """Terminate every worker, wait at most `grace_s` in all, kill stragglers; returns those killed."""
        self.terminate_all()
        deadline = time.monotonic() + grace_s
        while self.alive() and time.monotonic() < deadline:
            time.sleep(0.05)
        killed = self.kill_all()
        for proc in self.procs.values():
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(1.0)
        return killed
