"""A one-machine rehearsal of a 3-host Ray cluster (issue 30): the head in this namespace on an
address of the rehearsal's bridge (the driver host), a node in the "remote" and one in the "local"
host namespace, each started with `ray start` as a user types it on its own machine, so the nodes'
addresses differ as on three machines. The cluster uses token authentication, the token passed
as on real hosts (RAY_AUTH_MODE=token and RAY_AUTH_TOKEN in each node's and the driver's environment).

Each node is a `ray start --block` process stopped by its pid: SIGTERM makes it end the processes it
started. `ray stop` is not used: it ends every Ray process of the machine by name, other runs' too.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import logging
import os
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

import pytest

from emulator.net.host_rehearsal import PREFIXLEN, HostRehearsal
from emulator.net.kernel_entries import rtnl
from emulator.net.names import new_run_id
from emulator.ray_cluster import check_cluster, signal_handlers_kept

REPO = Path(__file__).resolve().parents[3]
RAY = str(REPO / ".venv" / "bin" / "ray")
DRIVER_HOST_INDEX = 254  # the driver's address on the bridge: 10.<k>.0.254, clear of the hosts' .1-.64
START_TIMEOUT_S = 60.0  # three Ray nodes starting at once on a busy 2-core machine
STOP_TIMEOUT_S = 20.0  # a node's `ray start --block` ends its processes on SIGTERM, gracefully first
NODE_RESOURCES = {"remote": {"prfaas_remote": 1}, "local": {"prfaas_local": 2}}
# What a test on the rehearsed hosts needs: root (namespaces, a bridge, tc qdiscs), and iproute2's
# ip and tc (`ray start` runs in a host's namespace; tc reads each host's qdiscs independently).
HOST_TEST_MARKS = (pytest.mark.root, pytest.mark.slow, pytest.mark.live,
                   pytest.mark.skipif(os.geteuid() != 0, reason="needs root: namespaces, a bridge and tc qdiscs"),
                   pytest.mark.skipif(not (shutil.which("ip") and shutil.which("tc")),
                                      reason="needs iproute2's ip to run `ray start` in a host and tc to check the hosts"))
Test = TypeVar("Test", bound=Callable[..., None])


def on_rehearsed_hosts(test: Test) -> Test:
    """`test` with HOST_TEST_MARKS."""
    for mark in HOST_TEST_MARKS:
        test = mark(test)
    return test


@dataclass(slots=True)
class RayHosts:
    """The rehearsed cluster: the head's address, each host's address and the token the nodes use."""

    rehearsal: HostRehearsal
    driver_addr: str
    port: int
    token: str
    log_dir: Path
    node_procs: dict[str, subprocess.Popen] = field(default_factory=dict)

    @property
    def address(self) -> str:
        return f"{self.driver_addr}:{self.port}"

    def addr(self, host: str) -> str:
        return self.driver_addr if host == "driver" else self.rehearsal.host(host).addr

    def env(self) -> dict[str, str]:
        """What a user exports on each host (and where the driver runs) to join this cluster."""
        return {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": self.token, "RAY_USAGE_STATS_ENABLED": "0"}

    def tc(self, host: str, *args: str) -> str:
        """`tc ARGS dev IFACE` in `host`'s namespace, on its bridge interface: what its kernel holds."""
        h = self.rehearsal.host(host)
        return subprocess.run(["ip", "netns", "exec", h.netns, "tc", *args, "dev", h.ifname], check=True,
                              capture_output=True, text=True, timeout=30).stdout


@contextlib.contextmanager
def token_env(env: Mapping[str, str]) -> Iterator[None]:
    """`env` in this process's environment meanwhile, with Ray's cached auth mode and token reloaded
    both ways (Ray reads RAY_AUTH_MODE once; ray._private.authentication does the same refresh)."""
    from ray._raylet import AuthenticationTokenLoader, Config

    saved = {key: os.environ.get(key) for key in env}
    os.environ.update(env)
    Config.initialize("")
    AuthenticationTokenLoader.instance().reset_cache()
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        Config.initialize("")
        AuthenticationTokenLoader.instance().reset_cache()


@contextlib.contextmanager
def ray_hosts(run_id: str | None = None) -> Iterator[RayHosts]:
    """The head on the driver's bridge address, then a node in each host namespace; everything stops
    on the way out (nodes by pid, then the rehearsal down), also when starting fails."""
    rehearsal = HostRehearsal.up(run_id or new_run_id(), hosts=("remote", "local"))
    hosts: RayHosts | None = None
    try:
        driver_addr = _give_driver_an_address(rehearsal)
        hosts = RayHosts(rehearsal, driver_addr, _free_port(driver_addr), secrets.token_hex(32),
                         Path(tempfile.mkdtemp(prefix="prf-ray-hosts-")))
        with token_env(hosts.env()):
            _start_node(hosts, "driver", ["--head", f"--node-ip-address={driver_addr}", f"--port={hosts.port}",
                                          "--num-cpus=1", "--include-dashboard=false"])
            _wait_for_nodes(hosts, 1)
            for num_nodes, (name, resources) in enumerate(NODE_RESOURCES.items(), start=2):
                _start_node(hosts, name, [f"--address={hosts.address}", f"--node-ip-address={hosts.addr(name)}",
                                          "--num-cpus=1", f"--resources={json.dumps(resources)}"],
                            netns=rehearsal.host(name).netns)
                _wait_for_nodes(hosts, num_nodes)  # one at a time: nodes of one machine share the
                # session dir, and two raylets starting at once can pick the same socket there
            yield hosts
    finally:
        if hosts is not None:
            stop_nodes(hosts)
            shutil.rmtree(hosts.log_dir, ignore_errors=True)
        rehearsal.down()


def stop_nodes(hosts: RayHosts) -> None:
    """Workers' nodes first, the head last; SIGKILL to whatever outlives STOP_TIMEOUT_S."""
    for name in reversed(list(hosts.node_procs)):
        proc = hosts.node_procs.pop(name)
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5.0)


def _give_driver_an_address(rehearsal: HostRehearsal) -> str:
    """10.<k>.0.254 on the bridge, so this namespace is a host on the subnet (removed with the bridge)."""
    addr = str(ipaddress.IPv4Network(rehearsal.subnet)[DRIVER_HOST_INDEX])
    with rtnl("") as ipr:
        ipr.addr("add", index=ipr.link_lookup(ifname=rehearsal.bridge)[0], address=addr, prefixlen=PREFIXLEN)
    return addr


def _free_port(addr: str) -> int:
    with socket.socket() as sock:
        sock.bind((addr, 0))
        return sock.getsockname()[1]


def _start_node(hosts: RayHosts, name: str, args: list[str], netns: str | None = None) -> None:
    command = [RAY, "start", *args, "--disable-usage-stats", "--block"]
    if netns is not None:
        command = ["ip", "netns", "exec", netns, *command]  # execs: the pid is `ray start`'s own
    with open(hosts.log_dir / f"{name}.log", "wb") as log:  # the child keeps its own copy of the fd
        hosts.node_procs[name] = subprocess.Popen(command, env={**os.environ, **hosts.env()}, stdout=log,
                                                  stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)


def _wait_for_nodes(hosts: RayHosts, num_nodes: int) -> None:
    deadline, last = time.monotonic() + START_TIMEOUT_S, "not asked yet"
    while time.monotonic() < deadline:
        dead = [name for name, proc in hosts.node_procs.items() if proc.poll() is not None]
        if dead:
            tail = (hosts.log_dir / f"{dead[0]}.log").read_text(errors="replace").strip().splitlines()[-1:]
            raise RuntimeError(f"ray start on host {dead[0]} exited: {' '.join(tail) or 'no output'}")
        try:
            if (info := check_cluster(hosts.address)).num_alive_nodes >= num_nodes:
                return
            last = f"{info.num_alive_nodes} alive"
        except Exception as err:  # noqa: BLE001 (the head is still starting: any refusal means "not yet")
            last = str(err)
        time.sleep(0.5)
    raise RuntimeError(f"rehearsed Ray cluster: {num_nodes} nodes not alive within {START_TIMEOUT_S:g} s ({last})")


@contextlib.contextmanager
def joined_driver() -> Iterator[RayHosts]:
    """A rehearsed cluster with this process joined as its driver (the token in its environment)."""
    import ray

    with signal_handlers_kept(), ray_hosts() as hosts, token_env(hosts.env()):
        ray.init(address=hosts.address, logging_level=logging.WARNING, log_to_driver=False)
        try:
            yield hosts
        finally:
            ray.shutdown()
