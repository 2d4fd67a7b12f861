"""Stopping `python -m emulator run` (virtual engine) with a storm of signals: 2 or 3 SIGINTs within a
second, at varied moments (early in the simulation, late in it, at the end while the record is
written). However many come, the command ends with summary.json and requests.parquet written whole,
and every request in the record completed or failed with a reason. A run the signal stopped says
`stopped`, leaves its `expect:` unjudged and exits 130 (128 + SIGINT); one that had already ended
when the signal came keeps its own outcome and exit status."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from emulator.control.types import FailReason

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[3]
EXIT_GUARD_S = 120.0  # a hang guard, not a timing assert: the test fails instead of waiting forever


def start(out: Path, duration_s: int) -> tuple[subprocess.Popen, Path]:
    log = out.parent / f"{out.name}.log"
    with open(log, "wb") as log_file:
        proc = subprocess.Popen(
            [sys.executable, "-m", "emulator", "-v", "run", "scenarios/paper-case-study.yaml", "--out", str(out),
             "--progress-every", "0.2", "--set", f"duration_s={duration_s}"],
            cwd=REPO, stdout=log_file, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    return proc, log


def wait_for(proc: subprocess.Popen, log: Path, text: str) -> None:
    deadline = time.monotonic() + EXIT_GUARD_S
    while text not in log.read_text(errors="replace"):
        assert proc.poll() is None, f"exited with {proc.returncode} before {text!r}:\n{log.read_text()}"
        assert time.monotonic() < deadline, f"no {text!r}:\n{log.read_text()}"
        time.sleep(0.02)


def assert_whole_record(out: Path) -> tuple[dict, list[dict]]:
    """summary.json parses as the recorder's document; requests.parquet reads whole; every request
    ended, a failure with a FailReason."""
    doc = json.loads((out / "summary.json").read_text())
    rows = pq.read_table(out / "requests.parquet").to_pylist()
    assert doc["kind"] == "prfaas-run" and doc["summary"]["requests"] == len(rows)
    reasons = {r.value for r in FailReason}
    for row in rows:
        assert row["status"] in ("completed", "failed"), row
        assert (row["status"] == "failed") == (row["fail_reason"] in reasons), row
    assert not [p.name for p in out.iterdir() if p.name.endswith(".tmp")]  # no half-written file left
    return doc, rows


@pytest.mark.parametrize(("duration_s", "first_after_s", "gaps_s"), [
    (20_000, 0.0, (0.05,)),  # at once, twice
    (20_000, 0.5, (0.1, 0.1)),  # early, three times
    (20_000, 2.0, (0.3, 0.4)),  # later, spread over most of a second
    (6_000, 2.5, (0.2, 0.2)),  # near the end of a short run: the record is being written
])
def test_a_storm_of_sigints_ends_with_the_whole_record(tmp_path: Path, duration_s: int, first_after_s: float,
                                                      gaps_s: tuple[float, ...]) -> None:
    out = tmp_path / "run"
    proc, log = start(out, duration_s)
    try:
        wait_for(proc, log, "progress: ")
        time.sleep(first_after_s)
        for gap_s in (0.0, *gaps_s):
            time.sleep(gap_s)
            if proc.poll() is None:
                proc.send_signal(signal.SIGINT)
        proc.wait(EXIT_GUARD_S)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    text = log.read_text(errors="replace")
    assert "Traceback" not in text and "KeyError" not in text, text[-3000:]
    doc, rows = assert_whole_record(out)
    meta = doc["meta"]
    if meta["outcome"] == "stopped":
        assert proc.returncode == 130, text[-3000:]
        assert all(r["fail_reason"] in (None, "interrupted") for r in rows)  # no rows: stopped at t = 0
        assert meta["stopped_by"] == "SIGINT" and f"  ended: {meta['end_reason']}" in text
        assert meta["end_reason"].startswith("stopped at t = ") and "by SIGINT (Ctrl-C" in meta["end_reason"]
        assert doc["expect_status"] in ("none", "not_judged") and doc["expect_failures"] == []
    else:  # the signals came as the record was written: absorbed, the run's own verdict stands
        assert meta["outcome"] == "finished" and proc.returncode in (0, 1), text[-3000:]


def test_a_run_that_is_not_stopped_writes_its_record_once(tmp_path: Path) -> None:
    """The reference: the same command, left alone, ends with every request completed."""
    proc, log = start(tmp_path / "run", 600)
    assert proc.wait(EXIT_GUARD_S) == 0, log.read_text()
    doc, rows = assert_whole_record(tmp_path / "run")
    assert doc["meta"]["end_reason"] == "run ended" and all(r["status"] == "completed" for r in rows)
    assert doc["meta"]["outcome"] == "finished" and doc["meta"]["stopped_by"] is None


def test_sigterm_stops_the_run_unjudged_with_exit_143(tmp_path: Path) -> None:
    """SIGTERM (a service manager, `kill`): the run is `stopped` by SIGTERM, the bound it would miss
    is not judged, and the command says so in words and exits 128 + 15."""
    out = tmp_path / "run"
    log = out.parent / "run.log"
    with open(log, "wb") as log_file:
        proc = subprocess.Popen(
            [sys.executable, "-m", "emulator", "run", "scenarios/paper-case-study.yaml", "--out", str(out),
             "--progress-every", "0.2", "--set", "duration_s=20000", "--set", "expect.completed_fraction={min: 1}"],
            cwd=REPO, stdout=log_file, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    try:
        wait_for(proc, log, "progress: ")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(EXIT_GUARD_S) == 143, log.read_text()[-3000:]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    doc, _ = assert_whole_record(out)
    assert (doc["meta"]["outcome"], doc["meta"]["stopped_by"]) == ("stopped", "SIGTERM")
    assert (doc["expect_status"], doc["expect_failures"]) == ("not_judged", [])
    lines = log.read_text().splitlines()
    assert f"  ended: {doc['meta']['end_reason']}" in lines
    assert f"  expect: {doc['expect_note']}" in lines and lines[-1].endswith("min 1         not judged")
    assert not any("FAILED" in line for line in lines)


def test_a_signal_after_the_summary_cannot_change_the_exit_status(tmp_path: Path) -> None:
    """CI once saw a finished run exit -2: a SIGINT came after the summary printed, when Python had put
    back its default handler (raised KeyboardInterrupt) or, during shutdown, the system's (kills). Once
    the command's work is done, SIGINT and SIGTERM are ignored until the process exits, so the signal
    sent here right after `run` returns leaves its status alone."""
    script = (
        "import os, signal, sys\n"
        "from emulator.__main__ import main\n"
        f"code = main(['run', 'scenarios/paper-case-study.yaml', '--out', {str(tmp_path / 'run')!r},"
        " '--set', 'duration_s=60'])\n"
        "os.kill(os.getpid(), signal.SIGINT); os.kill(os.getpid(), signal.SIGTERM)\n"
        "sys.exit(code)\n")
    proc = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True,
                          timeout=EXIT_GUARD_S)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert_whole_record(tmp_path / "run")
