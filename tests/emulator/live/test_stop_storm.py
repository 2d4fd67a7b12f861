"""A storm of stop signals on a live run: SIGINT 2 and 3 times within a second, at varied moments
(mid-run, and right after the first signal while the record is being written). The record is written
first and whole, before the teardown hurries; the command never ends in a traceback.

Each case spawns `python -m emulator run` as a user would (tun link, tiny preset), as test_stop.py does.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from emulator.control.types import FailReason
from tests.emulator.live.test_stop import CliRun, assert_complete_record, write_scenario

pytestmark = [pytest.mark.root, pytest.mark.slow,
              pytest.mark.skipif(os.geteuid() != 0, reason="needs root: namespaces and TUN need CAP_NET_ADMIN")]
EXIT_GUARD_S = 60.0  # a hang guard, not a timing assert


@pytest.fixture
def cli_runs():
    runs: list[CliRun] = []
    yield runs
    for run in runs:
        run.close()


@pytest.mark.parametrize(("after_running_s", "gaps_s"), [
    (1.0, (0.05,)),  # twice at once: the second lands while open requests are failed / the record starts
    (3.0, (0.2, 0.3)),  # three times within a second, mid-run
    (5.0, (0.1, 0.1)),  # three in 0.2 s (signals closer than the handler runs coalesce, as the kernel does)
])
def test_a_storm_of_sigints_ends_with_the_whole_record(tmp_path: Path, cli_runs, after_running_s: float,
                                                      gaps_s: tuple[float, ...]) -> None:
    scenario = write_scenario(tmp_path / "sc.yaml", duration_s=30.0, link_at_s=None, rate_per_s=4.0)
    run = CliRun(scenario, tmp_path / "run")
    cli_runs.append(run)
    run.wait_for_log(": running")
    time.sleep(after_running_s)
    for gap_s in (0.0, *gaps_s):
        time.sleep(gap_s)
        if run.proc.poll() is None:
            run.proc.send_signal(signal.SIGINT)
    try:
        run.proc.wait(EXIT_GUARD_S)
    except subprocess.TimeoutExpired:
        pytest.fail(f"still running {EXIT_GUARD_S:g} s after the signals:\n{run.log()[-3000:]}")
    log = run.log()
    assert "Traceback" not in log and "KeyError" not in log, log[-3000:]
    assert run.proc.returncode == 130, log[-3000:]  # 128 + SIGINT: stopped, its record whole
    requests, doc = assert_complete_record(tmp_path / "run")
    assert (doc["meta"]["outcome"], doc["meta"]["stopped_by"]) == ("stopped", "SIGINT")
    assert set(requests.loc[requests["status"] == "failed", "fail_reason"]) <= {r.value for r in FailReason}
    steps = {entry["step"]: entry for entry in doc["meta"]["engine_details"]["teardown"]}
    assert steps["write the record"]["outcome"] == "ok"  # never cut by the hurry
