"""The launcher hands every worker the scenario's settings (the transport's connections and
congestion control among them) as a validated settings file, not as flags."""

from __future__ import annotations

from pathlib import Path

from emulator.control.types import Cluster, Role
from emulator.live.launcher import WorkerPlan, WorkerProcesses
from emulator.net.ledger import Ledger
from emulator.net.names import new_run_id
from emulator.net.spec import parse_link_spec
from emulator.net.topology import Topology
from emulator.wire.worker_settings import WorkerSettings, read_settings

from .test_engine import scenario


def _flags(command: list[str]) -> dict[str, str]:
    return {flag: value for flag, value in zip(command, command[1:], strict=False) if flag.startswith("--")}


def _settings(command: list[str]) -> WorkerSettings:
    flags = _flags(command)
    assert set(flags) == {"--node", "--gateway", "--settings"}, flags
    return read_settings(Path(flags["--settings"]))


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
