"""A started run's files as the registry reads them back (summary.json for the Live page's results):
through the run-folder reader, so a link or a nested document is no summary, never a crash or a leak."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from app.run_registry import StartedRun
from emulator.api import RunHandle

pytestmark = pytest.mark.live  # every test here starts a process


def _started(out_dir: Path) -> StartedRun:
    done = subprocess.Popen([sys.executable, "-c", "pass"])
    done.wait()
    return StartedRun(RunHandle("abc123", "virtual", out_dir, out_dir / "run.log", None, done), "s", out_dir, ())


def test_summary_reads_the_runs_own_document(tmp_path: Path) -> None:
    (tmp_path / "summary.json").write_text(json.dumps({"kind": "prfaas-run", "summary": {"completed": 3}}))
    assert _started(tmp_path).summary() == {"kind": "prfaas-run", "summary": {"completed": 3}}


def test_a_summary_linked_elsewhere_is_no_summary(tmp_path: Path) -> None:
    (tmp_path / "credentials.json").write_text('{"token": "TOPSECRET-0a9c"}')
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "summary.json").symlink_to(tmp_path / "credentials.json")
    assert _started(tmp_path / "run").summary() is None


def test_a_nested_summary_is_no_summary(tmp_path: Path) -> None:
    (tmp_path / "summary.json").write_text("[" * 100_000 + "]" * 100_000)
    assert _started(tmp_path).summary() is None
