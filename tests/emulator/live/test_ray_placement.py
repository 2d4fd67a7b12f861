"""Live workers placed on Ray nodes by resource (emulator/live/ray_placement.py): one unit of the
cluster's resource per worker, packed onto alive nodes; a cluster that cannot hold the run is
refused in one line naming the resource, before anything starts. No Ray needed."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from emulator.control.types import Cluster, Role
from emulator.errors import ScenarioError
from emulator.live.launcher import WorkerPlan, plan_workers
from emulator.live.ray_hosting import resources_of
from emulator.live.ray_placement import RayNode, place_on_nodes
from emulator.scenario import parse_scenario

REPO = Path(__file__).resolve().parents[3]
QUICKSTART = yaml.safe_load((REPO / "scenarios" / "live-quickstart.yaml").read_text())
RESOURCES = {Cluster.REMOTE: "prfaas_remote", Cluster.LOCAL: "prfaas_local"}
HEAD = RayNode("h" * 56, "10.0.0.1", {"CPU": 2.0})
REMOTE_BOX = RayNode("r" * 56, "10.0.0.2", {"CPU": 8.0, "prfaas_remote": 1.0})
LOCAL_BOX = RayNode("l" * 56, "10.0.0.3", {"CPU": 8.0, "prfaas_local": 2.0})


def plans(num_remote: int, num_local: int) -> list[WorkerPlan]:
    return ([WorkerPlan(Cluster.REMOTE, i, Role.PREFILL) for i in range(num_remote)]
            + [WorkerPlan(Cluster.LOCAL, i, Role.PREFILL if i == 0 else Role.DECODE) for i in range(num_local)])


def refusal(workers: list[WorkerPlan], nodes: list[RayNode]) -> str:
    with pytest.raises(ScenarioError) as err:
        place_on_nodes(workers, nodes, RESOURCES, "10.0.0.1:6379")
    assert "\n" not in str(err.value)
    return str(err.value)


def test_each_cluster_lands_on_the_nodes_offering_its_resource() -> None:
    placed = place_on_nodes(plans(1, 2), [HEAD, REMOTE_BOX, LOCAL_BOX], RESOURCES)
    assert {name: node.ip for name, node in placed.items()} == {
        "remote-prefill-0": "10.0.0.2", "local-prefill-0": "10.0.0.3", "local-decode-1": "10.0.0.3"}


def test_workers_are_packed_first_fit_and_spill_to_the_next_node() -> None:
    second = RayNode("s" * 56, "10.0.0.4", {"prfaas_local": 3.0})
    placed = place_on_nodes(plans(0, 4), [LOCAL_BOX, second], RESOURCES)
    assert [placed[p.spawn_name].ip for p in plans(0, 4)] == ["10.0.0.3", "10.0.0.3", "10.0.0.4", "10.0.0.4"]


def test_a_resource_no_node_offers_is_refused_naming_it_and_how_to_offer_it() -> None:
    line = refusal(plans(1, 2), [HEAD, LOCAL_BOX])
    assert line.startswith("ray.remote_resource: no node of the cluster at 10.0.0.1:6379 offers prfaas_remote")
    assert "ray start --address 10.0.0.1:6379 --resources '{\"prfaas_remote\": 1}'" in line


def test_a_dead_node_offers_nothing() -> None:
    dead = RayNode(REMOTE_BOX.node_id, REMOTE_BOX.ip, REMOTE_BOX.resources, alive=False)
    assert refusal(plans(1, 2), [HEAD, dead, LOCAL_BOX]).startswith("ray.remote_resource: no node")


def test_too_few_units_are_refused_with_how_many_are_needed_and_offered() -> None:
    line = refusal(plans(1, 3), [HEAD, REMOTE_BOX, LOCAL_BOX])
    assert line.startswith("ray.local_resource: the local cluster's 3 workers need 3 units of prfaas_local, "
                           "the cluster at 10.0.0.1:6379 offers 2")


def test_fractional_units_do_not_count_as_a_worker() -> None:
    half = RayNode("f" * 56, "10.0.0.5", {"prfaas_remote": 0.5})
    assert refusal(plans(1, 0), [half]).startswith("ray.remote_resource: no node")


def test_the_scenarios_resource_names_place_its_own_plan() -> None:
    doc = copy.deepcopy(QUICKSTART)
    doc["ray"] = {"address": "10.0.0.1:6379", "remote_resource": "big_gpu_box", "local_resource": "pd_box"}
    sc = parse_scenario(doc, REPO / "scenarios")
    nodes = [RayNode("a" * 56, "10.0.0.7", {"big_gpu_box": 1.0}), RayNode("b" * 56, "10.0.0.8", {"pd_box": 2.0})]
    placed = place_on_nodes(plan_workers(sc, 1), nodes, resources_of(sc.ray), sc.ray.address)
    assert {name: node.ip for name, node in placed.items()} == {
        "remote-prefill-0": "10.0.0.7", "local-prefill-0": "10.0.0.8", "local-decode-1": "10.0.0.8"}
    with pytest.raises(ScenarioError, match=r"^ray\.remote_resource: no node .* offers big_gpu_box"):
        place_on_nodes(plan_workers(sc, 1), [HEAD, LOCAL_BOX], resources_of(sc.ray), sc.ray.address)


@pytest.mark.parametrize("ray, line", [
    ({"address": "10.0.0.1"}, "ray.address: '10.0.0.1' is invalid"),
    ({"remote_resource": "gpu box"}, "ray.remote_resource: 'gpu box' is invalid"),
    ({"local_resource": "x" * 65}, "ray.local_resource:"),
    ({"local_resource": "prfaas_remote"}, "ray.local_resource: 'prfaas_remote' is also the remote_resource"),
])
def test_a_bad_ray_section_is_one_line_naming_the_field(ray: dict, line: str) -> None:
    doc = copy.deepcopy(QUICKSTART)
    doc["ray"] = ray
    with pytest.raises(ScenarioError) as err:
        parse_scenario(doc, REPO / "scenarios")
    assert str(err.value).startswith(line) and "\n" not in str(err.value)


def test_the_virtual_engine_refuses_a_ray_section() -> None:
    doc = {**copy.deepcopy(QUICKSTART), "engine": "virtual", "ray": {"address": "local"}}
    with pytest.raises(ScenarioError, match=r"^ray: only the live engine places workers on Ray nodes"):
        parse_scenario(doc, REPO / "scenarios")
