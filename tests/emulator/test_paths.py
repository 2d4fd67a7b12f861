"""emulator/paths.py is the one place that reads `PRFAAS_*` variables and decides where files live,
and the README's Environment table documents each variable once."""

from __future__ import annotations

import ast
import os
import re
from pathlib import Path

import pytest

from emulator import paths
from emulator.net import ledger

ROOT = Path(__file__).resolve().parents[2]
SOURCES = ("emulator", "app", "bench", "model_stub")
NAME = re.compile(r"PRFAAS_[A-Z_]+")
# The worker's per-run secret is taken out of the environment by the worker itself (auth.py).
READERS = {"PRFAAS_WORKER_SECRET": {Path("emulator/wire/auth.py")}}


def _variable_literals() -> dict[str, set[Path]]:
    """Every string constant that is exactly a PRFAAS_* name, by the files that hold it."""
    found: dict[str, set[Path]] = {}
    for top in SOURCES:
        for path in sorted((ROOT / top).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Constant) and isinstance(node.value, str) and NAME.fullmatch(node.value):
                    found.setdefault(node.value, set()).add(path.relative_to(ROOT))
    return found


def test_every_variable_is_named_in_paths_only() -> None:
    literals = _variable_literals()
    assert set(literals) <= {env.value for env in paths.Env}, "a PRFAAS_* variable outside emulator.paths.Env"
    elsewhere = {name: files - {Path("emulator/paths.py")} - READERS.get(name, set())
                 for name, files in literals.items()}
    assert not {name: files for name, files in elsewhere.items() if files}


def test_no_code_reads_the_environment_for_a_prfaas_variable_but_paths() -> None:
    """Reads through os.environ / os.getenv with a literal name, outside paths.py and auth.py."""
    pattern = re.compile(r"(environ(\.get)?\(|getenv\(|environ\[)\s*[\"']PRFAAS_")
    hits = [path for top in SOURCES for path in (ROOT / top).rglob("*.py") if pattern.search(path.read_text())]
    assert hits == []


def test_the_readme_documents_every_variable_once() -> None:
    readme = (ROOT / "README.md").read_text()
    section = readme.split("### Environment", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| `(PRFAAS_[A-Z_]+)` \|", section, re.M)
    assert sorted(rows) == sorted(env.value for env in paths.Env)


def test_defaults_follow_the_checkout(monkeypatch: pytest.MonkeyPatch) -> None:
    for env in paths.Env:
        monkeypatch.delenv(env, raising=False)
    assert paths.REPO_ROOT == ROOT and (paths.REPO_ROOT / "emulator" / "paths.py").is_file()
    assert paths.shared_dir() == ROOT.parent / "shared"
    assert paths.runs_dir() == ROOT / "runs"
    assert paths.accel_dir() == ROOT / "build" / "accel" and not paths.accel_disabled()
    assert paths.data_dirs() == () and paths.broker_url() == "" and paths.relay_log_level() == "INFO"
    expected = Path("/run/prfaas") if os.geteuid() == 0 else Path(f"/tmp/prfaas-{os.geteuid()}")
    assert paths.state_dir() == expected


def test_the_environment_moves_them(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(paths.Env.SHARED_DIR, str(tmp_path / "shared"))
    monkeypatch.setenv(paths.Env.RUNS_DIR, " ~/runs-here ")
    monkeypatch.setenv(paths.Env.DATA_DIRS, os.pathsep.join([str(tmp_path / "a"), "", str(tmp_path / "b")]))
    monkeypatch.setenv(paths.Env.ACCEL, "0")
    monkeypatch.setenv(paths.Env.RELAY_LOG, "DEBUG")
    assert paths.shared_dir() == tmp_path / "shared"
    assert paths.runs_dir() == Path.home() / "runs-here"
    assert paths.data_dirs() == (tmp_path / "a", tmp_path / "b")
    assert paths.accel_disabled() and paths.relay_log_level() == "DEBUG"


def test_the_ledger_keeps_its_privacy_check_on_the_dir_paths_names(monkeypatch: pytest.MonkeyPatch,
                                                                    tmp_path: Path) -> None:
    state = tmp_path / "state"
    monkeypatch.setenv(paths.Env.STATE_DIR, str(state))
    assert ledger.state_root() == state and state.stat().st_mode & 0o777 == 0o700
    state.chmod(0o777)
    with pytest.raises(ledger.TopologyError, match="writable by others"):
        ledger.state_root()
