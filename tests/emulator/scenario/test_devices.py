"""`clusters.*.devices`: the shape `validate` checks without a GPU (one GPU per instance, none twice,
indices bounded, not with device cpu), each problem one line naming the field and the fix."""

from __future__ import annotations

import copy

import pytest

from emulator.errors import ScenarioError
from emulator.limits import MAX_GPUS
from emulator.scenario import apply_overrides, parse_scenario

from .test_bounds import QUICKSTART, SCENARIOS  # remote: 1 instance on cpu; local: 2 on cpu


def clusters(remote: dict, local: dict) -> dict:
    doc = copy.deepcopy(QUICKSTART)
    doc["clusters"]["remote"] |= remote
    doc["clusters"]["local"] |= local
    return doc


def lines(doc: dict) -> list[str]:
    with pytest.raises(ScenarioError) as err:
        parse_scenario(doc, SCENARIOS)
    return str(err.value).splitlines()


def test_lists_and_auto_are_kept_and_absent_means_none() -> None:
    sc = parse_scenario(clusters({"device": "h200", "devices": [3]}, {"device": "h20", "devices": [0, 1]}), SCENARIOS)
    assert (sc.clusters.remote.devices, sc.clusters.local.devices) == ((3,), (0, 1))
    sc = parse_scenario(clusters({"device": "gpu", "devices": "auto"}, {}), SCENARIOS)
    assert (sc.clusters.remote.devices, sc.clusters.local.devices) == ("auto", None)


@pytest.mark.parametrize("remote, local, expected", [
    ({"device": "h200", "devices": [0]}, {"device": "h20", "devices": [1, 2, 3]},
     ["clusters.local.devices: 3 GPUs for 2 instances; list one GPU per instance, or use auto"]),
    ({"device": "h200", "devices": [0]}, {"device": "h20", "devices": [1, 1]},
     ["clusters.local.devices: GPU 1 listed more than once; give each worker its own GPU"]),
    ({"device": "h200", "devices": [1]}, {"device": "h20", "devices": [1, 2]},
     ["clusters.local.devices: GPU 1 also in clusters.remote.devices; give each worker its own GPU"]),
    ({"devices": [0]}, {"devices": "auto"},
     ["clusters.remote.devices: given with clusters.remote.device cpu; drop devices to run on CPU, or name "
      "the GPU in device (e.g. h200)",
      "clusters.local.devices: given with clusters.local.device cpu; drop devices to run on CPU, or name "
      "the GPU in device (e.g. h200)"]),
])
def test_a_bad_placement_is_one_line_per_problem(remote: dict, local: dict, expected: list[str]) -> None:
    assert lines(clusters(remote, local)) == expected


@pytest.mark.parametrize("value", [[MAX_GPUS], [-1], list(range(MAX_GPUS + 1)), ["0"], [True], [0.0], "all", 2])
def test_anything_but_bounded_gpu_indices_or_auto_is_refused(value) -> None:
    (line,) = lines(clusters({"device": "h200", "devices": value}, {}))
    assert line.startswith("clusters.remote.devices: ") and line.endswith(
        f"is not a list of GPU indices 0..{MAX_GPUS - 1} nor auto; list one GPU per instance, e.g. [0, 1], "
        "or use auto"), line


def test_more_instances_by_override_must_bring_their_gpus() -> None:
    sc = parse_scenario(clusters({"device": "h200"}, {"device": "h20", "devices": [2, 3]}), SCENARIOS)
    with pytest.raises(ScenarioError, match=r"^clusters.local.devices: 2 GPUs for 3 instances; "):
        apply_overrides(sc, ["clusters.local.instances=3"])
    grown = apply_overrides(sc, ["clusters.local.instances=3", "clusters.local.devices=[2, 3, 4]"])
    assert grown.clusters.local.devices == (2, 3, 4)
