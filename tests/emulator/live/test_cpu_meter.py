"""The foreign-load meter against real processes: a busy loop that is not ours reads as about one
core, the same loop given as ours reads as none, and the calibration's CPU-sharing rounds run again
and say so while a foreign loop holds a core, and so does a speed reference."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from emulator.live.cpu_meter import foreign_cores, machine_busy_s, process_cpu_s, read_cpu
from emulator.live.machine_probes import started_probes
from emulator.live.cpu_meter import FOREIGN_CORES_LIMIT, TRIES
from emulator.live.machine_profile import MachinePlan, _sharing
from emulator.live.speed_reference import metered_reference

SPIN = "import time\nend = time.monotonic() + 60\nwhile time.monotonic() < end: pass"


@contextmanager
def spinning() -> Iterator[subprocess.Popen[bytes]]:
    """One process keeping one core busy (at most 60 s), killed on the way out."""
    proc = subprocess.Popen([sys.executable, "-c", SPIN])
    try:
        time.sleep(0.3)  # past its start-up
        yield proc
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.live  # it starts the busy loop's process
def test_a_busy_loop_not_ours_is_one_foreign_core_and_ours_is_none() -> None:
    with spinning() as spin:
        before = read_cpu([])
        time.sleep(1.5)
        after = read_cpu([])
        ours_before = read_cpu([spin.pid])
        time.sleep(1.5)
        ours_after = read_cpu([spin.pid])
    assert 0.75 <= foreign_cores(before, after) <= 1.35
    assert foreign_cores(ours_before, ours_after) <= 0.35
    assert process_cpu_s(spin.pid) == 0.0  # gone: its counters no longer read


def test_the_machine_counters_only_grow() -> None:
    first = machine_busy_s()
    sum(i * i for i in range(200_000))
    assert machine_busy_s() >= first > 0


@pytest.mark.slow
def test_a_sharing_round_under_foreign_load_runs_again_and_says_so() -> None:
    plan = MachinePlan(preset="kimi-linear-mini", size="tiny", seed=0, lengths=(64,), batch_sizes=(1,),
                       decode_cache_tokens=64, decode_steps=1, reps=1, busy_op_tokens=64, num_workers=2, max_busy=2,
                       busy_window_s=1.0, quick=True)
    lines: list[str] = []
    with started_probes(2, plan.preset, plan.size, plan.seed) as probes, spinning():
        factors, foreign = _sharing(probes, plan, lines.append)
    assert len(factors) == 2 and factors[0] == 1.0
    assert foreign > FOREIGN_CORES_LIMIT, lines  # the loop held its core through every try
    assert all(f"{TRIES} tries" in line and "calibrate again on a quieter machine" in line for line in lines)


@pytest.mark.slow
def test_a_speed_reference_under_foreign_load_is_timed_again_and_says_so() -> None:
    with started_probes(1, "kimi-linear-mini", "tiny", 0) as probes:
        quiet = metered_reference(probes[0], 64)
        with spinning():
            disturbed = metered_reference(probes[0], 64)
    # nothing else ran: a stray blip (a previous test's process winding down) may cost one more try
    assert quiet.foreign_cores <= FOREIGN_CORES_LIMIT and "doubtful" not in quiet.note and quiet.value > 0
    assert disturbed.tries == TRIES and disturbed.foreign_cores > FOREIGN_CORES_LIMIT
    assert "calibrate again on a quieter machine" in disturbed.note
