"""`python -m emulator run` as a script or CI sees it: the final table lists every `expect:` bound,
held or failed, and without a terminal progress comes as plain lines, not silence."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from emulator.cli.run import expect_lines

REPO = Path(__file__).resolve().parents[3]


@pytest.mark.live
def test_the_final_table_lists_each_expect_bound_held_or_failed(tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "emulator", "run", "scenarios/mooncake-replay.yaml", "--out", str(tmp_path / "run"),
         "--set", "workload.max_requests=100", "--set", "expect.ttft_p90_s={max: 1000}",
         "--set", "expect.throughput_rps={min: 1000}"],
        cwd=REPO, capture_output=True, text=True, timeout=120)
    assert out.returncode == 1, out.stderr  # one bound failed
    lines = out.stdout.splitlines()
    assert any(line.startswith("  workload: replaying 100 of 3,993 rows") for line in lines)
    assert any(line.startswith("  TTFT P90 (s) ") for line in lines)  # figures by their labels
    assert any(line.startswith("  egress mean ") and "bit/s" in line for line in lines)
    bounds = lines[lines.index("  expect: 1 of 2 bounds failed") + 1:]
    assert len(bounds) == 2
    held, failed = bounds
    assert held.split()[:4] == ["TTFT", "P90", "(s)", "[ttft_p90_s]"] and held.endswith("max 1,000     held")
    doc = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert doc["expect_failures"] == [failed.split("FAILED: ", 1)[1]]  # the recorder's own verdict
    assert "[throughput_rps]" in failed and "min 1,000" in failed
    # stderr is a pipe: a plain progress line (at least the last one), never a redrawn bar
    progress = [line for line in out.stderr.splitlines() if line.startswith("progress: ")]
    assert progress and progress[-1].startswith("progress: 100/100 requests ended, run time ")
    assert "\r" not in out.stderr


def test_expect_lines_judge_each_bound_alone() -> None:
    summary = {"ttft_p90_s": 2.5, "throughput_rps": 3.0}
    lines = expect_lines(summary, {"ttft_p90_s": {"min": 1, "max": 2}, "nope": {"max": 1}})
    assert [line.rsplit("  ", 1)[-1] for line in lines] == [
        "held", "FAILED: ttft_p90_s = 2.5 > max 2.0",
        "FAILED: nope: unknown metric; use one of throughput_rps, ttft_p90_s"]
