"""Which device each live worker runs on: one worker per GPU, pinned through its CUDA_VISIBLE_DEVICES.

`plan_devices` is pure (the number of GPUs this process sees comes in, so tests plan for any machine);
`count_visible_gpus` asks torch in a child process, since the gateway side never imports torch.
A cluster's `device` keeps its meaning (the hardware profile's name, h200 or h20, for the virtual
engine; cpu, cuda or gpu pick the worker's device); `devices` only says which GPUs, when given.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass

from emulator.control.types import Cluster
from emulator.errors import ScenarioError
from emulator.scenario.parts import ClustersSpec, LocalClusterSpec, RemoteClusterSpec

WORKER_DEVICES = {"cpu": "cpu", "cuda": "cuda", "gpu": "cuda"}  # a cluster's device name -> the worker's; else auto
VISIBLE = "CUDA_VISIBLE_DEVICES"
COUNT_TIMEOUT_S = 120.0  # importing torch on a loaded 2-core machine takes seconds, not minutes
COUNT_GPUS = "import torch; print(torch.cuda.device_count())"


@dataclass(frozen=True, slots=True)
class DevicePlacement:
    """One worker's device: `device` is its settings.device (cpu, cuda or auto), `gpu` its index
    among the GPUs this process sees, or None when the worker is not pinned to one."""

    device: str
    gpu: int | None = None

    @property
    def label(self) -> str | None:
        """What the Live page shows: cuda:1 or cpu; None where only the worker knows (auto, and
        unpinned cuda), which its hello then tells."""
        if self.gpu is not None:
            return f"cuda:{self.gpu}"
        return "cpu" if self.device == "cpu" else None


@dataclass(frozen=True, slots=True)
class Placement:
    """Every worker's device, by cluster and instance index (a restarted worker keeps its GPU), and
    what the run announces about them."""

    remote: tuple[DevicePlacement, ...]
    local: tuple[DevicePlacement, ...]
    notes: tuple[str, ...] = ()

    def of(self, cluster: Cluster, index: int) -> DevicePlacement:
        return (self.remote if cluster is Cluster.REMOTE else self.local)[index]


def asks_for_gpus(clusters: ClustersSpec) -> bool:
    return clusters.remote.devices is not None or clusters.local.devices is not None


def plan_devices(clusters: ClustersSpec, visible_gpus: int) -> Placement:
    """Each cluster's listed GPUs, or for `auto` the next free ones (remote first, then local; CPU
    when no GPU is visible), or without `devices` its `device` name's choice. The schema has checked
    one entry per instance and no GPU twice; ScenarioError (one line) when a listed GPU is not
    visible or `auto` finds too few free."""
    named: dict[str, RemoteClusterSpec | LocalClusterSpec] = {"remote": clusters.remote, "local": clusters.local}
    listed = {name: c.devices for name, c in named.items() if isinstance(c.devices, tuple)}
    for name, gpus in listed.items():
        if missing := [gpu for gpu in gpus if gpu >= visible_gpus]:
            raise ScenarioError(_not_visible(name, missing[0], visible_gpus))
    taken = {gpu for gpus in listed.values() for gpu in gpus}
    free = [gpu for gpu in range(visible_gpus) if gpu not in taken]
    planned: dict[str, tuple[DevicePlacement, ...]] = {}
    notes = []
    for name, cluster in named.items():
        n = cluster.instances
        if cluster.devices is None:
            planned[name] = (DevicePlacement(WORKER_DEVICES.get(cluster.device, "auto")),) * n
            continue
        if cluster.devices == "auto" and not visible_gpus:
            planned[name] = (DevicePlacement("cpu"),) * n
            if n:
                notes.append(f"clusters.{name}.devices: auto, but no GPU is visible; its workers run on CPU")
            continue
        if cluster.devices == "auto":
            if n > len(free):
                raise ScenarioError(_too_few_free(name, n, len(free), visible_gpus))
            gpus, free = tuple(free[:n]), free[n:]
        else:
            gpus = listed[name]
        planned[name] = tuple(DevicePlacement("cuda", gpu) for gpu in gpus)
        if n:
            notes.append(f"{name} workers on GPUs {', '.join(map(str, gpus))} (one each)")
    return Placement(planned["remote"], planned["local"], tuple(notes))


def _not_visible(name: str, gpu: int, visible_gpus: int) -> str:
    where = f"clusters.{name}.devices: asks for GPU {gpu}"
    if not visible_gpus:
        return f"{where} but no GPU is visible; drop devices to run on CPU, or use auto"
    if visible_gpus == 1:
        return f"{where} but 1 is visible; list GPU 0 or use auto"
    return f"{where} but {visible_gpus} are visible; list GPUs 0..{visible_gpus - 1} or use auto"


def _too_few_free(name: str, needed: int, num_free: int, visible_gpus: int) -> str:
    where = f"clusters.{name}.devices: auto needs {needed} GPUs (one per instance)"
    verb = "is" if num_free == 1 else "are"
    if num_free == visible_gpus:
        return f"{where} but {visible_gpus} {verb} visible; lower clusters.{name}.instances"
    other = "local" if name == "remote" else "remote"
    return (f"{where} but {num_free} of the {visible_gpus} visible {verb} free; lower "
            f"clusters.{name}.instances, or give clusters.{other} fewer GPUs")


def count_visible_gpus(env: Mapping[str, str] | None = None) -> int:
    """GPUs torch sees in a child process with `env` (default: ours), CUDA_VISIBLE_DEVICES honoured;
    in a child so that the gateway neither imports torch nor holds a CUDA context."""
    try:
        done = subprocess.run([sys.executable, "-c", COUNT_GPUS], env=None if env is None else dict(env),
                              capture_output=True, text=True, timeout=COUNT_TIMEOUT_S, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise ScenarioError(f"clusters.*.devices: counting the visible GPUs took over {COUNT_TIMEOUT_S:g} s; "
                            "drop devices to run on CPU") from None
    answer = done.stdout.strip()
    if done.returncode != 0 or not answer.isdigit():
        why = (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1]
        raise ScenarioError(f"clusters.*.devices: could not count the visible GPUs ({why}); drop devices "
                            "to run on CPU")
    return int(answer)


def place_workers(clusters: ClustersSpec) -> Placement:
    """The run's placement; GPUs are counted only when a cluster asks for them."""
    return plan_devices(clusters, count_visible_gpus() if asks_for_gpus(clusters) else 0)


def device_env(placement: DevicePlacement, parent: Mapping[str, str]) -> dict[str, str]:
    """The CUDA_VISIBLE_DEVICES a worker gets: its one GPU (the parent's own entry where the parent
    has a list, since `gpu` counts what the parent sees), '' for a CPU worker so that it never
    touches a GPU, and nothing for auto or unpinned cuda (they see what the parent sees)."""
    if placement.gpu is not None:
        inherited = [entry.strip() for entry in parent.get(VISIBLE, "").split(",") if entry.strip()]
        return {VISIBLE: inherited[placement.gpu] if inherited else str(placement.gpu)}
    return {VISIBLE: ""} if placement.device == "cpu" else {}
