"""The optional compiled build of the virtual engine's hot path (its event loop and the control
plane it calls per request), and the check that loads it only while it matches the sources.

Everything is plain Python and runs as such. `python -m emulator accel build` type-checks and
compiles COMPILED with mypyc into build/accel/, with a manifest of the sources' hashes (`make run`
and `make test` run `accel ensure`, which builds only when that build is missing or stale).
The virtual engine's entry points (the command line, emulator/virtual/engine.py and
bench/virtual_speed.py, each by importing emulator/virtual/accel_on.py first) call `activate()`,
which puts the build's folders ahead of the packages' own, but only while every hash still matches,
so an edited source never runs as a stale binary; importing `emulator` for anything else leaves
build/accel alone. PRFAAS_ACCEL=0 forces the interpreted modules; PRFAAS_ACCEL_DIR points at
another build (emulator/paths.py reads both). `python -m emulator accel status` says which one
would run and why; `RUNS_AS` says which one does, once activated.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import os
import shutil
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

from emulator import paths

ROOT = paths.REPO_ROOT
MANIFEST = "manifest.json"
# The event loop and what it calls per event (engine.py and the scheduler's numpy work run once
# per simulation or per interval and stay interpreted). The live engine imports the same router.
COMPILED = (
    "emulator/virtual/core.py", "emulator/virtual/link.py", "emulator/virtual/link_state.py",
    "emulator/virtual/transfer.py", "emulator/virtual/overflow.py", "emulator/virtual/nodes.py",
    "emulator/virtual/gateway.py", "emulator/virtual/loops.py", "emulator/virtual/costs.py",
    "emulator/virtual/water_fill.py",
    "emulator/control/router.py", "emulator/control/prefix_cache.py", "emulator/control/prefix_entries.py",
    "emulator/control/curve.py", "emulator/control/estimators.py", "emulator/control/scheduler.py",
    "emulator/control/placement.py", "emulator/telemetry/records.py",
    "emulator/telemetry/metrics.py", "emulator/telemetry/egress.py", "emulator/run/journey.py", "emulator/run/board.py", "emulator/run/core.py",
    "emulator/run/ttft_window.py", "emulator/run/feed.py", "emulator/run/workload_clock.py",
    "emulator/run/protocol.py", "emulator/run/ending.py",
)
PACKAGES = ("emulator.control", "emulator.telemetry", "emulator.virtual", "emulator.run")
MYPY_OPTIONS = ("--ignore-missing-imports", "--follow-imports=silent")
RUNS_AS_BEFORE = "interpreted: not activated (only the virtual engine's entry points activate the build)"
RUNS_AS = RUNS_AS_BEFORE


def build_dir() -> Path:
    return paths.accel_dir()


def source_hashes() -> dict[str, str]:
    return {path: hashlib.sha256((ROOT / path).read_bytes()).hexdigest() for path in COMPILED}


def _abi() -> str:
    return f"{sys.implementation.cache_tag} {sysconfig.get_platform()} {sysconfig.get_config_var('EXT_SUFFIX')}"


def check(directory: Path) -> str | None:
    """None when the build in `directory` is to be used, else why not (the off switch included)."""
    if paths.accel_disabled():
        return f"{paths.Env.ACCEL}=0"
    return build_problem(directory)


def build_problem(directory: Path) -> str | None:
    """None when `directory` holds a build of the current sources for this interpreter, else why not."""
    try:
        manifest = json.loads((directory / MANIFEST).read_text())
    except FileNotFoundError:
        return f"no build in {directory} (make accel)"
    except (OSError, ValueError) as exc:
        return f"{directory / MANIFEST} is unreadable ({exc}); rebuild with make accel"
    if manifest.get("abi") != _abi():
        return f"the build in {directory} is for {manifest.get('abi')!r}, not {_abi()!r}; rebuild with make accel"
    built = manifest.get("sources", {})
    changed = [path for path, digest in source_hashes().items() if built.get(path) != digest]
    if changed:
        return f"the build in {directory} is stale ({', '.join(changed)} changed); rebuild with make accel"
    return None


def activate() -> str:
    """Put a current build ahead of the compiled packages' own folders; returns what runs, in words
    (kept in RUNS_AS). Must come before any compiled module is imported: one already loaded from
    its source is kept, and the build refused, since a mix of the two would break mypyc's native
    calls. Importing emulator.virtual.accel_on calls this; the virtual engine's entry points do."""
    global RUNS_AS
    if not RUNS_AS.startswith("compiled"):
        RUNS_AS = _activate(build_dir())
    return RUNS_AS


def _activate(directory: Path) -> str:
    why_not = check(directory)
    if why_not is not None:
        return f"interpreted: {why_not}"
    loaded = sorted(name for name, module in list(sys.modules.items())
                    if _module_of(name) in COMPILED and str(getattr(module, "__file__", "")).endswith(".py"))
    if loaded:
        return f"interpreted: {', '.join(loaded)} imported before the build was activated"
    for name in PACKAGES:
        package = importlib.import_module(name)  # the package's __init__ only: a docstring
        if (folder := str(directory.joinpath(*name.split(".")))) not in package.__path__:
            package.__path__.insert(0, folder)
    if str(directory) not in sys.path:
        sys.path.append(str(directory))  # mypyc's shared runtime module sits at the build's root
    return f"compiled (mypyc, {directory})"


def _module_of(name: str) -> str:
    return name.replace(".", "/") + ".py"


def build(directory: Path | None = None) -> Path:
    """Type-check and compile COMPILED into `directory` (replacing what was there); returns it.
    Needs mypy (requirements-dev.txt) and a C compiler; raises on a type error or a failed compile."""
    from mypyc.build import mypycify  # build-time only: mypy is not needed to run the build
    from setuptools import Distribution

    directory = directory or build_dir()
    directory.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="accel-", dir=directory.parent) as tmp:
        staged, work = Path(tmp) / "out", Path(tmp) / "work"
        cwd = os.getcwd()
        os.chdir(ROOT)  # mypyc names modules by their paths from the import root
        try:
            extensions = mypycify([*MYPY_OPTIONS, *COMPILED], opt_level="3", target_dir=str(work / "c"))
            command = Distribution({"ext_modules": extensions}).get_command_obj("build_ext")
            command.build_lib, command.build_temp = str(staged), str(work / "obj")
            command.ensure_finalized()
            command.run()
        finally:
            os.chdir(cwd)
        manifest = {"abi": _abi(), "sources": source_hashes(), "built_at": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
        (staged / MANIFEST).write_text(json.dumps(manifest, indent=1))
        shutil.rmtree(directory, ignore_errors=True)
        staged.rename(directory)
    return directory
