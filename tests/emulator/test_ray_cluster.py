"""Joining a Ray cluster by address (emulator/ray_cluster.py), against a real two-node cluster
started with `ray start` as README.md tells users (token authentication on): a sweep runs on both
nodes, and each way a driver can be turned away is named in one line, with its fix."""

from __future__ import annotations

import json
import platform
import socket
import subprocess
import sys
from collections.abc import Iterator
from importlib.metadata import version
from pathlib import Path

import pandas as pd
import pytest

from emulator.paths import REPO_ROOT
from emulator.ray_cluster import ClusterUnreachable, Problem, check_cluster, parse_address, version_mismatch
from tests.emulator.ray_start_cluster import RayStartCluster, free_port, ray_start_cluster

BASE = REPO_ROOT / "scenarios" / "paper-case-study.yaml"
SWEEP = ("name: two-nodes\nbase: {base}\nset: [duration_s=20]\n"
         "axes:\n  workload.arrival.rate_per_s: {{values: [1.0, 1.5, 2.0, 2.5]}}\n"
         "seeds: [0, 1]\nmetrics: [throughput_rps]\n")
CLI_TIMEOUT_S = 120  # bounds a hang only; the figures are bench/ray_connect.py's


@pytest.fixture(scope="module")
def cluster() -> Iterator[RayStartCluster]:
    with ray_start_cluster() as started:
        yield started


def _sweep_cli(cluster: RayStartCluster, tmp_path: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    path = tmp_path / "two-nodes.yaml"
    path.write_text(SWEEP.format(base=BASE))
    return subprocess.run([sys.executable, "-m", "emulator", "sweep", str(path), "--out", str(tmp_path / "out"),
                           "--ray", cluster.address], env=env, cwd=REPO_ROOT, capture_output=True, text=True,
                          timeout=CLI_TIMEOUT_S)


@pytest.mark.live
def test_a_sweep_runs_on_both_nodes_of_a_ray_start_cluster(cluster: RayStartCluster, tmp_path: Path) -> None:
    done = _sweep_cli(cluster, tmp_path, cluster.env)
    assert done.returncode == 0, done.stderr
    rows = pd.read_parquet(tmp_path / "out" / "sweep.parquet")
    assert (len(rows), set(rows["status"])) == (8, {"ok"})
    assert rows["node_id"].nunique() == 2, rows["node_id"].value_counts()
    ray_doc = json.loads((tmp_path / "out" / "sweep.json").read_text())["ray"]
    assert (ray_doc["mode"], ray_doc["num_nodes"], ray_doc["num_cpus"]) == ("joined", 2, 2)


def _env_case(name: str, change: dict[str, str | None], needle: str) -> object:
    return pytest.param(change, needle, id=name)


@pytest.mark.live
@pytest.mark.parametrize(("change", "needle"), [
    _env_case("mode-unset", {"RAY_AUTH_MODE": None}, "sends none (RAY_AUTH_MODE is unset); export RAY_AUTH_MODE=token"),
    _env_case("wrong-token", {"RAY_AUTH_TOKEN": "0" * 32}, "refused this machine's token (from RAY_AUTH_TOKEN)"),
    _env_case("no-token", {"HOME": "/nonexistent-home"}, "RAY_AUTH_MODE=token but this machine has no token"),
])
def test_a_driver_the_cluster_turns_away_is_told_why_in_one_line(
        cluster: RayStartCluster, tmp_path: Path, change: dict[str, str | None], needle: str) -> None:
    env = {k: v for k, v in cluster.env.items() if change.get(k, v) is not None}
    env.update({k: v for k, v in change.items() if v is not None})
    done = _sweep_cli(cluster, tmp_path, env)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert lines[0].startswith("two-nodes: 8 points"), lines  # the CLI's header, then the one line
    assert len(lines) == 2 and lines[1].startswith(f"error: --ray {cluster.address}: "), lines
    assert needle in lines[1]
    assert "ray get-auth-token" in lines[1]


@pytest.fixture
def some_token(monkeypatch: pytest.MonkeyPatch) -> None:
    """A token in the environment, so the check gets past this machine's own set-up whatever mode an
    earlier test's Ray left this process in (a local Ray turns token mode on in-process)."""
    monkeypatch.setenv("RAY_AUTH_TOKEN", "0" * 32)


# Run with the cluster's token: check the cluster as it is, then record other versions in the head's
# CLUSTER_METADATA (where `ray start` put its own), check again, and put the record back whatever happened.
OTHER_VERSIONS_SNIPPET = """
import json, sys
from ray._raylet import InnerGcsClient
from emulator.ray_cluster import ClusterUnreachable, check_cluster
key, space = b"CLUSTER_METADATA", b"cluster"
info = check_cluster(sys.argv[1])
gcs = InnerGcsClient.standalone(sys.argv[1], None, 5000)
found = gcs.internal_kv_get(key, space, 5.0)
other = {**json.loads(found), "ray_version": "2.52.1"}
gcs.internal_kv_put(key, json.dumps(other).encode(), True, space, 5.0)
try:
    check_cluster(sys.argv[1]); refused = None
except ClusterUnreachable as err:
    refused = [err.problem.value, str(err)]
finally:
    gcs.internal_kv_put(key, found, True, space, 5.0)
print(json.dumps({"found": [info.ray_version, info.python_version, info.num_alive_nodes], "refused": refused}))
"""


@pytest.mark.live
def test_the_check_reads_the_cluster_and_names_another_ray(cluster: RayStartCluster) -> None:
    done = subprocess.run([sys.executable, "-c", OTHER_VERSIONS_SNIPPET, cluster.address], env=cluster.env,
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=CLI_TIMEOUT_S)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["found"] == [version("ray"), platform.python_version(), 2]
    problem, message = result["refused"]
    assert problem == Problem.VERSION_MISMATCH.value
    assert message.startswith(f"--ray {cluster.address}: the cluster runs Ray 2.52.1 on Python ")
    assert message.endswith("(pip install ray==2.52.1)")


def test_nothing_listening_is_named(some_token: None) -> None:
    port = free_port()  # bound and released: nothing listens there now
    with pytest.raises(ClusterUnreachable, match="nothing is listening there") as err:
        check_cluster(f"127.0.0.1:{port}")
    assert err.value.problem is Problem.NOT_LISTENING


@pytest.fixture
def silent_listener() -> Iterator[str]:
    """A TCP port that accepts connections (the kernel's backlog) and never answers: not a Ray head."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(8)
        yield f"127.0.0.1:{sock.getsockname()[1]}"


@pytest.mark.slow
def test_a_port_that_is_not_a_ray_head_is_named(silent_listener: str, some_token: None) -> None:
    with pytest.raises(ClusterUnreachable, match="something listens there but it is not a Ray head") as err:
        check_cluster(silent_listener)
    assert err.value.problem is Problem.NOT_RAY


def test_an_unreadable_token_path_is_refused_before_ray_reads_it(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """Ray aborts the whole process on an unreadable RAY_AUTH_TOKEN_PATH; the check refuses it first."""
    monkeypatch.delenv("RAY_AUTH_TOKEN", raising=False)
    monkeypatch.setenv("RAY_AUTH_TOKEN_PATH", str(tmp_path / "missing"))
    with pytest.raises(ClusterUnreachable, match=r"RAY_AUTH_TOKEN_PATH=.*missing: not a readable") as err:
        check_cluster(f"127.0.0.1:{free_port()}")  # refused before any connection is tried
    assert err.value.problem is Problem.TOKEN_MISSING


@pytest.mark.parametrize("address", ["10.0.0.5", "10.0.0.5:", ":6379", "10.0.0.5:port", "10.0.0.5:70000",
                                     "ray://10.0.0.5:10001", "10.0.0.5:\u00b2"])
def test_an_address_that_is_not_host_port_is_refused(address: str) -> None:
    """Before anything else: no token is looked for, no connection tried."""
    with pytest.raises(ClusterUnreachable, match=f"^--ray {address}: ") as err:
        check_cluster(address)
    assert err.value.problem is Problem.BAD_ADDRESS


def test_an_overlong_address_is_refused_without_echoing_it_whole() -> None:
    address = "10.0.0.5:" + "9" * 5000
    with pytest.raises(ClusterUnreachable, match=r"^--ray 10\.0\.0\.5:9{31}\.\.\.: 5009 characters, over 300; ") as err:
        check_cluster(address)
    assert err.value.problem is Problem.BAD_ADDRESS and len(str(err.value)) < 200


def test_host_and_port_are_parsed() -> None:
    assert parse_address("10.0.0.5:6379") == ("10.0.0.5", 6379)
    assert parse_address("[::1]:6379") == ("::1", 6379)


@pytest.mark.parametrize(("cluster_versions", "level", "expected"), [
    ({"ray_version": "2.60.0", "python_version": "3.11.7"}, "patch", None),
    ({"ray_version": "2.60.0", "python_version": "3.11.9"}, "minor", None),
    ({"ray_version": "2.60.0", "python_version": "3.11.9"}, "patch",
     "the cluster runs Ray 2.60.0 on Python 3.11.9, this process Ray 2.60.0 on Python 3.11.7"),
    ({"ray_version": "2.52.1", "python_version": "3.11.7"}, "minor",
     "the cluster runs Ray 2.52.1 on Python 3.11.7, this process Ray 2.60.0 on Python 3.11.7"),
    ({}, "patch", None),  # a head that recorded no versions: ray.init decides
])
def test_versions_must_match_as_ray_requires(cluster_versions: dict[str, str], level: str,
                                             expected: str | None) -> None:
    found = version_mismatch(cluster_versions, ("2.60.0", "3.11.7"), level)
    if expected is None:
        assert found is None
    else:
        assert found is not None and found.startswith(expected)
        assert found.endswith(f"(pip install ray=={cluster_versions['ray_version']})")
