"""The compiled virtual engine: a build is used only while it matches its sources and this
interpreter, and a compiled run writes exactly what an interpreted one does."""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from emulator.virtual import accel

ROOT = Path(__file__).resolve().parents[3]

# One small scenario simulated in a fresh interpreter; prints which engine ran and every record.
PROBE = """
import json, sys
from emulator.scenario import apply_overrides, load_scenario
from emulator.virtual.engine import simulate
from emulator.virtual import accel
out = {"runs_as": accel.RUNS_AS}
for path, overrides in (("scenarios/paper-case-study.yaml", ["duration_s=400", "workload.max_requests=600"]),
                        ("scenarios/mooncake-replay.yaml", ["workload.trace.max_requests=300"])):
    result = simulate(apply_overrides(load_scenario(path), overrides))
    out[path] = {"records": [repr(r) for r in result.records], "samples": result.samples,
                 "decisions": result.loops.decisions, "prefix_index": result.gateway.core.use_index}
json.dump(out, sys.stdout)
"""


@pytest.fixture(autouse=True)
def _no_accel_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PRFAAS_ACCEL", raising=False)
    monkeypatch.delenv("PRFAAS_ACCEL_DIR", raising=False)
    monkeypatch.setattr(accel, "RUNS_AS", accel.RUNS_AS)  # what activate() decides here is undone


def _forget_compiled_modules(monkeypatch: pytest.MonkeyPatch) -> None:
    """This process may have imported compiled modules from their sources (other tests did)."""
    for name in list(sys.modules):
        if name.replace(".", "/") + ".py" in accel.COMPILED:
            monkeypatch.delitem(sys.modules, name)


def _manifest(directory: Path, **changes: object) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    manifest = {"abi": accel._abi(), "sources": accel.source_hashes(), **changes}
    (directory / accel.MANIFEST).write_text(json.dumps(manifest))


def test_a_current_build_is_put_ahead_of_the_sources(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _manifest(tmp_path)
    monkeypatch.setenv("PRFAAS_ACCEL_DIR", str(tmp_path))
    monkeypatch.setattr(sys, "path", list(sys.path))
    for name in accel.PACKAGES:
        monkeypatch.setattr(importlib.import_module(name), "__path__", ["sources"])
    _forget_compiled_modules(monkeypatch)
    assert accel.check(tmp_path) is None
    assert accel.activate() == f"compiled (mypyc, {tmp_path})"
    for name in accel.PACKAGES:
        assert importlib.import_module(name).__path__ == [str(tmp_path.joinpath(*name.split("."))), "sources"]
    assert str(tmp_path) in sys.path


@pytest.mark.parametrize(("changes", "words"), [
    ({"sources": {**accel.source_hashes(), accel.COMPILED[1]: "0" * 64}}, f"stale ({accel.COMPILED[1]} changed)"),
    ({"abi": "cpython-27 elsewhere"}, "is for 'cpython-27 elsewhere'"),
])
def test_a_stale_or_foreign_build_is_refused_with_the_reason(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, changes: dict, words: str) -> None:
    _manifest(tmp_path, **changes)
    why = accel.check(tmp_path)
    assert why is not None and words in why and "make accel" in why
    monkeypatch.setenv("PRFAAS_ACCEL_DIR", str(tmp_path))
    paths = {name: list(importlib.import_module(name).__path__) for name in accel.PACKAGES}
    assert accel.activate() == f"interpreted: {why}"
    assert paths == {name: list(importlib.import_module(name).__path__) for name in accel.PACKAGES}


def test_no_build_and_the_off_switch_say_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert accel.check(tmp_path / "missing") == f"no build in {tmp_path / 'missing'} (make accel)"
    _manifest(tmp_path)
    monkeypatch.setenv("PRFAAS_ACCEL", "0")
    assert accel.check(tmp_path) == "PRFAAS_ACCEL=0"


def test_a_module_loaded_from_its_source_keeps_the_build_out(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _manifest(tmp_path)
    monkeypatch.setenv("PRFAAS_ACCEL_DIR", str(tmp_path))
    _forget_compiled_modules(monkeypatch)
    monkeypatch.setitem(sys.modules, "emulator.control.router", importlib.import_module("emulator.control.router"))
    paths = {name: list(importlib.import_module(name).__path__) for name in accel.PACKAGES}
    runs_as = accel.activate()
    assert runs_as.startswith("interpreted: ") and runs_as.endswith(" imported before the build was activated")
    assert "emulator.control.router" in runs_as
    assert paths == {name: list(importlib.import_module(name).__path__) for name in accel.PACKAGES}


# Which modules a fresh interpreter imports, and whether the build's folder ended up on sys.path.
IMPORTS = """
import importlib, json, sys
for name in sys.argv[1:]:
    importlib.import_module(name)
from emulator.virtual import accel
print(json.dumps({"runs_as": accel.RUNS_AS, "on_path": any("{build}" in p for p in sys.path)}))
"""


def _imports(build: Path, *modules: str) -> dict:
    env = {**os.environ, "PRFAAS_ACCEL_DIR": str(build)}
    done = subprocess.run([sys.executable, "-c", IMPORTS.replace("{build}", str(build)), *modules], cwd=ROOT,
                          capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout)


@pytest.mark.live
def test_only_the_virtual_engines_entry_points_activate_the_build(tmp_path: Path) -> None:
    _manifest(tmp_path)  # a current build as far as the check knows (its folders are empty)
    elsewhere = _imports(tmp_path, "emulator", "emulator.api", "emulator.scenario", "emulator.net.ledger",
                         "emulator.live.launcher", "emulator.telemetry.records")
    assert elsewhere == {"runs_as": accel.RUNS_AS_BEFORE, "on_path": False}
    engine = _imports(tmp_path, "emulator.scenario", "emulator.virtual.engine")
    assert engine == {"runs_as": f"compiled (mypyc, {tmp_path})", "on_path": True}


def _probe(env: dict[str, str]) -> dict:
    done = subprocess.run([sys.executable, "-c", PROBE], cwd=ROOT, capture_output=True, text=True,
                          timeout=300, env={**os.environ, **env})
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout)


@pytest.mark.slow
def test_the_compiled_engine_writes_what_the_interpreted_one_does(tmp_path: Path) -> None:
    """Builds into a temporary folder unless the repository's build is current (make accel)."""
    directory = accel.build_dir() if accel.check(accel.build_dir()) is None else accel.build(tmp_path / "accel")
    compiled = _probe({"PRFAAS_ACCEL_DIR": str(directory)})
    interpreted = _probe({"PRFAAS_ACCEL": "0"})
    assert compiled.pop("runs_as").startswith("compiled") and interpreted.pop("runs_as").startswith("interpreted")
    case, trace = compiled["scenarios/paper-case-study.yaml"], compiled["scenarios/mooncake-replay.yaml"]
    assert len(case["records"]) == 600 and case["decisions"]  # the scheduler acted
    assert len(trace["records"]) == 300 and trace["prefix_index"]  # prefix caching in play
    assert compiled == interpreted
