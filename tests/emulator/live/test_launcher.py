"""The launcher hands every worker the scenario's settings (the transport's connections and
congestion control among them) as a validated settings file, not as flags, and an environment that
pins it to its placement's GPU."""

from __future__ import annotations

from pathlib import Path

import pytest

from emulator.control.types import Cluster, Role
from emulator.live.launcher import WorkerPlan, WorkerProcesses, worker_env
from emulator.live.placement import DevicePlacement, plan_devices
from emulator.net.ledger import Ledger
from emulator.net.names import new_run_id
from emulator.net.spec import parse_link_spec
from emulator.net.topology import Topology
from emulator.wire.worker_settings import WorkerSettings, read_settings

from .test_engine import scenario

pytestmark = pytest.mark.live  # every test here starts a process


def _flags(command: list[str]) -> dict[str, str]:
    return {flag: value for flag, value in zip(command, command[1:], strict=False) if flag.startswith("--")}


def _settings(command: list[str]) -> WorkerSettings:
    flags = _flags(command)
    assert set(flags) == {"--node", "--settings"}, flags  # the gateway's port is in the file (issue 25)
    assert not any("40000" in arg for arg in command), command
    path = Path(flags["--settings"])
    assert path.stat().st_mode & 0o777 == 0o600  # only the run's user reads where its gateway listens
    settings = read_settings(path)
    assert settings.gateway == ("127.0.0.1", 40000)
    return settings


def test_workers_open_the_scenarios_tcp_connections_with_its_congestion_control(tmp_path: Path) -> None:
    sc = scenario(transport={"connections": 7, "congestion": "reno"})
    run_id = new_run_id()
    topology = Topology(parse_link_spec({"bandwidth_mbit": 100}), backend="proxy", run_id=run_id).up()
    try:
        workers = WorkerProcesses(sc, topology, 40000, tmp_path, Ledger.open(run_id))
        for plan in (WorkerPlan(Cluster.REMOTE, 0, Role.PREFILL), WorkerPlan(Cluster.LOCAL, 1, Role.DECODE)):
            command = workers.command(plan)
            settings = _settings(command)
            assert (settings.connections, settings.congestion) == (7, "reno")
            assert _flags(command)["--node"] == plan.spawn_name and settings.seed == 7
            assert settings == workers.settings(plan)
        default = _settings(WorkerProcesses(scenario(), topology, 40000, tmp_path, Ledger.open(run_id)).command(
            WorkerPlan(Cluster.LOCAL, 0, Role.PREFILL)))
        assert (default.connections, default.congestion) == (4, "cubic")
    finally:
        topology.down()


def test_each_worker_gets_its_placements_device_and_gpu_in_its_environment(tmp_path: Path) -> None:
    sc = scenario(clusters={"remote": {"instances": 1, "device": "h200", "devices": [1]},
                            "local": {"instances": 2, "device": "cpu", "prefill_instances": 1}})
    placement = plan_devices(sc.clusters, visible_gpus=2)
    run_id = new_run_id()
    topology = Topology(parse_link_spec({"bandwidth_mbit": 100}), backend="proxy", run_id=run_id).up()
    try:
        workers = WorkerProcesses(sc, topology, 40000, tmp_path, Ledger.open(run_id), placement)
        remote, local = WorkerPlan(Cluster.REMOTE, 0, Role.PREFILL), WorkerPlan(Cluster.LOCAL, 1, Role.DECODE)
        assert (_settings(workers.command(remote)).device, _settings(workers.command(local)).device) == ("cuda", "cpu")
    finally:
        topology.down()
    parent, secret = {"PATH": "/usr/bin", "OMP_NUM_THREADS": "8"}, {"PRFAAS_WORKER_SECRET": "s"}
    assert worker_env(parent, placement.of(Cluster.REMOTE, 0), secret) == {
        "PATH": "/usr/bin", "OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": "1", "PRFAAS_WORKER_SECRET": "s"}
    assert worker_env(parent | {"CUDA_VISIBLE_DEVICES": "2,3"}, placement.of(Cluster.REMOTE, 0), secret)[
        "CUDA_VISIBLE_DEVICES"] == "3"  # GPU 1 of the two the gateway sees
    assert worker_env(parent | {"CUDA_VISIBLE_DEVICES": "2,3"}, placement.of(Cluster.LOCAL, 1), secret)[
        "CUDA_VISIBLE_DEVICES"] == ""  # a CPU worker never touches a GPU
    assert "CUDA_VISIBLE_DEVICES" not in worker_env(parent, DevicePlacement("auto"), secret)
