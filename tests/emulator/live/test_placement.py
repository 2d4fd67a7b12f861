"""Placement of live workers on GPUs, planned for any machine (the visible count is passed in): one
worker per listed GPU, `auto` on the next free ones, CPU where none is visible, a one-line error
when a run asks for more GPUs than it sees; and the CUDA_VISIBLE_DEVICES each worker gets."""

from __future__ import annotations

import os

import pytest

from emulator.control.types import Cluster
from emulator.errors import ScenarioError
from emulator.live.placement import DevicePlacement, count_visible_gpus, device_env, plan_devices

from .test_engine import scenario

CPU, AUTO = DevicePlacement("cpu"), DevicePlacement("auto")


def gpus(*indices: int) -> tuple[DevicePlacement, ...]:
    return tuple(DevicePlacement("cuda", i) for i in indices)


def clusters(remote: dict, local: dict, **changes):
    """Two remote and two local instances, on h200 and h20 unless `remote`/`local` say otherwise."""
    return scenario(clusters={"remote": {"instances": 2, "device": "h200"} | remote,
                              "local": {"instances": 2, "device": "h20", "prefill_instances": 1} | local},
                    **changes).clusters


def test_listed_gpus_pin_one_worker_each_in_instance_order() -> None:
    placement = plan_devices(clusters({"devices": [0, 1]}, {"devices": [3, 2]}), visible_gpus=4)
    assert (placement.remote, placement.local) == (gpus(0, 1), gpus(3, 2))
    assert placement.of(Cluster.LOCAL, 0) == DevicePlacement("cuda", 3)
    assert [p.label for p in placement.local] == ["cuda:3", "cuda:2"]
    assert placement.notes == ("remote workers on GPUs 0, 1 (one each)", "local workers on GPUs 3, 2 (one each)")


def test_auto_takes_the_next_free_gpus_remote_first_around_listed_ones() -> None:
    both = plan_devices(clusters({"devices": "auto"}, {"devices": "auto"}), visible_gpus=4)
    assert (both.remote, both.local) == (gpus(0, 1), gpus(2, 3))
    mixed = plan_devices(clusters({"devices": "auto"}, {"devices": [0, 2]}), visible_gpus=5)
    assert (mixed.remote, mixed.local) == (gpus(1, 3), gpus(0, 2))


def test_without_devices_the_device_name_decides_as_before() -> None:
    placement = plan_devices(clusters({"device": "cpu"}, {"device": "cuda"}), visible_gpus=8)
    assert (placement.remote, placement.local, placement.notes) == ((CPU, CPU), (DevicePlacement("cuda"),) * 2, ())
    assert [p.label for p in (CPU, AUTO, DevicePlacement("cuda"))] == ["cpu", None, None]  # the hello tells
    h200 = plan_devices(clusters({}, {"devices": [0, 1]}), visible_gpus=2)  # remote lists none: auto, unpinned
    assert (h200.remote, h200.local) == ((AUTO, AUTO), gpus(0, 1))


def test_auto_runs_on_cpu_where_no_gpu_is_visible() -> None:
    placement = plan_devices(clusters({"devices": "auto"}, {"devices": "auto"}), visible_gpus=0)
    assert (placement.remote, placement.local) == ((CPU, CPU), (CPU, CPU))
    assert placement.notes == ("clusters.remote.devices: auto, but no GPU is visible; its workers run on CPU",
                               "clusters.local.devices: auto, but no GPU is visible; its workers run on CPU")


@pytest.mark.parametrize("remote, local, visible, message", [
    ({"devices": [0, 1]}, {"devices": [2, 3]}, 2,
     "clusters.local.devices: asks for GPU 2 but 2 are visible; list GPUs 0..1 or use auto"),
    ({"devices": [0, 1]}, {}, 1, "clusters.remote.devices: asks for GPU 1 but 1 is visible; list GPU 0 or use auto"),
    ({}, {"devices": [0, 1]}, 0,
     "clusters.local.devices: asks for GPU 0 but no GPU is visible; drop devices to run on CPU, or use auto"),
    ({"devices": "auto"}, {"devices": "auto"}, 3,
     "clusters.local.devices: auto needs 2 GPUs (one per instance) but 1 of the 3 visible is free; lower "
     "clusters.local.instances, or give clusters.remote fewer GPUs"),
    ({"devices": "auto"}, {}, 1,
     "clusters.remote.devices: auto needs 2 GPUs (one per instance) but 1 is visible; lower "
     "clusters.remote.instances"),
])
def test_asking_for_more_gpus_than_are_visible_is_one_line(remote, local, visible, message) -> None:
    with pytest.raises(ScenarioError) as err:
        plan_devices(clusters(remote, local), visible_gpus=visible)
    assert str(err.value) == message


def test_a_cluster_without_instances_needs_no_gpu() -> None:
    local_only = clusters({"instances": 0, "devices": "auto"}, {"devices": "auto"}, router={"policy": "local-only"})
    placement = plan_devices(local_only, visible_gpus=2)
    assert (placement.remote, placement.local) == ((), gpus(0, 1))
    assert placement.notes == ("local workers on GPUs 0, 1 (one each)",)


def test_each_worker_sees_only_its_own_gpu_and_a_cpu_worker_none() -> None:
    assert device_env(DevicePlacement("cuda", 2), {}) == {"CUDA_VISIBLE_DEVICES": "2"}
    # the index counts what the gateway sees: its own list's entry, whatever form it takes
    parent = {"CUDA_VISIBLE_DEVICES": "4, GPU-5e1c,6"}
    assert [device_env(DevicePlacement("cuda", i), parent) for i in range(3)] == [
        {"CUDA_VISIBLE_DEVICES": "4"}, {"CUDA_VISIBLE_DEVICES": "GPU-5e1c"}, {"CUDA_VISIBLE_DEVICES": "6"}]
    assert device_env(CPU, parent) == {"CUDA_VISIBLE_DEVICES": ""}
    assert device_env(AUTO, parent) == {} and device_env(DevicePlacement("cuda"), {}) == {}


@pytest.mark.live
def test_hidden_gpus_count_as_none() -> None:
    assert count_visible_gpus({**os.environ, "CUDA_VISIBLE_DEVICES": ""}) == 0
