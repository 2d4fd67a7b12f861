"""Whether this machine can hold a live run's workers, decided before anything is spawned.

Each instance of a live scenario is one OS process running the torch model. Past a few processes
per core, or past the memory they reserve, a run does not degrade gracefully: it swaps or starves
its own gateway. The check is a pure function of the scenario and the machine's figures (passed in,
so tests need no special machine); `machine_figures()` reads them for the real run.
"""

from __future__ import annotations

import os

from emulator.errors import ScenarioError
from emulator.limits import LIVE_MEMORY_SHARE, LIVE_WORKER_BYTES, LIVE_WORKERS_PER_CORE
from emulator.scenario import Scenario

GIB = 1 << 30


def live_workers(scenario: Scenario) -> int:
    """Worker processes a live run starts: one per instance of either cluster."""
    return scenario.clusters.remote.instances + scenario.clusters.local.instances


def check_live_capacity(scenario: Scenario, cores: int, memory_bytes: int) -> None:
    """Raise a one-line ScenarioError when the workers exceed LIVE_WORKERS_PER_CORE per core or
    their reserved memory (LIVE_WORKER_BYTES each) exceeds LIVE_MEMORY_SHARE of `memory_bytes`."""
    workers = live_workers(scenario)
    by_cores = max(1, cores) * LIVE_WORKERS_PER_CORE
    by_memory = int(memory_bytes * LIVE_MEMORY_SHARE) // LIVE_WORKER_BYTES
    allowed = min(by_cores, by_memory)
    if workers <= allowed:
        return
    raise ScenarioError(
        f"clusters.remote.instances + clusters.local.instances: {workers} live workers are too many "
        f"for this machine ({cores} cores and {memory_bytes / GIB:.0f} GiB: at most {allowed}, "
        f"{LIVE_WORKERS_PER_CORE} per core and {LIVE_WORKER_BYTES / GIB:g} GiB each); lower the instances "
        "or use --engine virtual"
    )


def machine_figures() -> tuple[int, int]:
    """(cores this process may run on, physical memory in bytes)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    return cores, memory


def check_live_start(scenario: Scenario) -> None:
    """What a live run checks before it makes a folder or spawns anything: a preset to run, and
    workers this machine can hold (the CLI and run_live both call it, so the first error is the same)."""
    if scenario.model.preset is None:
        raise ScenarioError("model.preset: the live engine runs a model_stub preset; set model.preset")
    check_live_capacity(scenario, *machine_figures())
