"""bench/virtual_speed.py's A/B plumbing: the --baseline revision is checked before anything runs, the
temporary worktree goes away whatever happens, and a child that imported the wrong tree is refused.
No timing here (bench/ measures; tests check behaviour)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from tests.bench.scripts import load_bench

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "bench" / "virtual_speed.py"


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    return load_bench("virtual_speed")


def head_sha() -> str:
    return subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                          check=True).stdout.strip()


@pytest.mark.live
@pytest.mark.parametrize("rev", ["no-such-revision", "", "--all", "HEAD:README.md"])
def test_a_baseline_that_names_no_commit_is_refused(bench: ModuleType, rev: str) -> None:
    with pytest.raises(bench.BenchError, match=r"^--baseline: .* names no commit") as caught:
        bench.resolve_rev(rev)
    assert "\n" not in str(caught.value)


@pytest.mark.live
def test_a_baseline_resolves_to_its_sha(bench: ModuleType) -> None:
    assert bench.resolve_rev("HEAD") == head_sha()


@pytest.mark.live
def test_the_command_line_refuses_a_bad_baseline_in_one_line_before_measuring() -> None:
    done = subprocess.run([sys.executable, str(SCRIPT), "--baseline", "no-such-revision", "--out", os.devnull],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        f"virtual_speed: --baseline: 'no-such-revision' names no commit in {ROOT}; give a sha, a branch or HEAD~1"]
    assert done.stdout == ""


@pytest.mark.live
def test_the_worktree_is_removed_even_when_the_run_fails(bench: ModuleType) -> None:
    with pytest.raises(RuntimeError, match="midway"), bench.detached_worktree(head_sha()) as tree:
        assert (tree / "emulator" / "virtual" / "accel_on.py").is_file()
        assert subprocess.run(["git", "rev-parse", "HEAD"], cwd=tree, capture_output=True, text=True,
                              check=True).stdout.strip() == head_sha()
        raise RuntimeError("midway")
    assert not tree.parent.exists()
    listed = subprocess.run(["git", "worktree", "list", "--porcelain"], cwd=ROOT, capture_output=True, text=True,
                            check=True).stdout
    assert str(tree) not in listed


def sample(emulator_file: Path, runs_as: str, compiled: dict[str, str]) -> dict[str, object]:
    return {"emulator_file": str(emulator_file), "runs_as": runs_as, "compiled_modules": compiled}


def test_a_child_that_imported_the_wrong_tree_is_refused(bench: ModuleType, tmp_path: Path) -> None:
    with pytest.raises(bench.BenchError, match="imported emulator from"):
        bench.check_imports(sample(ROOT / "emulator" / "__init__.py", "interpreted: x", {}), tmp_path)


def test_an_interpreted_child_is_refused_unless_asked_for(bench: ModuleType, tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    interpreted = sample(tmp_path / "emulator" / "__init__.py", "interpreted: no build", {})
    monkeypatch.delenv("PRFAAS_ACCEL", raising=False)
    with pytest.raises(bench.BenchError, match="compares compiled engines"):
        bench.check_imports(interpreted, tmp_path)
    monkeypatch.setenv("PRFAAS_ACCEL", "0")
    bench.check_imports(interpreted, tmp_path)


def test_a_compiled_module_from_another_build_is_refused(bench: ModuleType, tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PRFAAS_ACCEL", raising=False)
    own = tmp_path / "build" / "accel" / "emulator" / "virtual" / "core.so"
    stray = ROOT / "build" / "accel" / "emulator" / "control" / "router.so"
    compiled = {"emulator.virtual.core": str(own), "emulator.control.router": str(stray)}
    with pytest.raises(bench.BenchError, match=r"emulator\.control\.router loaded from outside"):
        bench.check_imports(sample(tmp_path / "emulator" / "__init__.py", "compiled (mypyc)", compiled), tmp_path)
