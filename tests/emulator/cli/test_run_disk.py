"""`python -m emulator run --out` on a disk that fills up (a 12 KiB tmpfs) or is read-only: one line
naming the file and the cause, exit 2, no traceback, and no half-written file under a final name."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from tests.emulator.tmpfs_helpers import mounted_tmpfs

pytestmark = [pytest.mark.root, pytest.mark.skipif(os.geteuid() != 0, reason="needs root: mounts a tmpfs")]
REPO = Path(__file__).resolve().parents[3]


def run_into(out: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "emulator", "run", "scenarios/mooncake-replay.yaml", "--out", str(out),
         "--set", "workload.max_requests=50"],
        cwd=REPO, capture_output=True, text=True, timeout=300)


def test_a_full_disk_ends_the_run_with_one_line(tmp_path: Path) -> None:
    with mounted_tmpfs(tmp_path / "disk", "12k") as disk:
        done = run_into(disk / "run")
        assert done.returncode == 2, done.stderr
        assert "Traceback" not in done.stderr, done.stderr
        errors = [line for line in done.stderr.splitlines() if not line.startswith("progress: ")]
        assert len(errors) == 1 and errors[0].startswith("error: record: "), done.stderr
        assert str(disk / "run") in errors[0] and "no space left on device (ENOSPC)" in errors[0]
        names = sorted(p.name for p in (disk / "run").iterdir())
        assert "summary.json" not in names and not [n for n in names if n.endswith(".tmp")], names
        for name in names:
            pq.read_table(disk / "run" / name)  # whatever got through reads whole


def test_a_read_only_disk_is_refused_before_the_run(tmp_path: Path) -> None:
    with mounted_tmpfs(tmp_path / "disk", "1m", read_only=True) as disk:
        for out in (disk, disk / "run"):
            done = run_into(out)
            assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
            assert done.stderr.splitlines() == [done.stderr.strip()], done.stderr
            assert done.stderr.startswith("error: record: ") and "read-only file system (EROFS)" in done.stderr
