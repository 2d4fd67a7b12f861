"""The runs this dashboard server started: one registry per server (an `st.cache_resource`), so
every page and session sees the same runs, and the server stops them when it exits.

Runs are started with the same API as the command line (`emulator.api.start_run`); a scenario and
its overrides are validated here first, so a bad value is refused on the page, not in a log.
"""

from __future__ import annotations

import atexit
import re
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
import streamlit as st

from app.live_view import recorded_frame
from emulator.api import RunHandle, start_run
from emulator.errors import TelemetryError
from emulator.net.names import new_run_id
from emulator.paths import Env, runs_dir
from emulator.scenario import apply_overrides, load_scenario
from emulator.telemetry.recorder import load_run
from emulator.telemetry.run_files import RunFolder

RUNS_DIR_ENV = Env.RUNS_DIR.value  # where started runs are recorded (default: the repository's runs/)
ENGINES = ("live", "virtual")


# `progress: 1,234/5,000 requests ended, run time 61.0 s, wall 2.0 s` (emulator/cli/run.py)
PROGRESS_LINE = re.compile(r"^progress: ([\d,]+)/([\d,]+) requests ended, run time ([\d.]+) s", re.MULTILINE)


@dataclass(frozen=True, slots=True)
class Progress:
    done: int  # requests ended
    total: int  # requests due within the duration
    run_s: float  # the run's own (for a virtual run, simulated) time


class RunRefused(Exception):
    """A start the registry will not make; the message says why and what to do."""


@dataclass
class StartedRun:
    handle: RunHandle
    scenario: str  # the scenario's name
    path: Path
    overrides: tuple[str, ...]
    started_wall: float = field(default_factory=time.time)

    @property
    def run_id(self) -> str:
        return self.handle.run_id

    @property
    def label(self) -> str:
        """Stable while the run goes (a selectbox keeps its choice by label)."""
        when = time.strftime("%H:%M:%S", time.localtime(self.started_wall))
        return f"{self.run_id} · {self.scenario} ({self.handle.engine}) · started {when}"

    def progress(self) -> Progress | None:
        """The last progress line the run's CLI wrote to its log (every few seconds when headless)."""
        found = PROGRESS_LINE.findall(self.handle.log_tail(40))
        if not found:
            return None
        done, total, run_s = found[-1]
        return Progress(int(done.replace(",", "")), int(total.replace(",", "")), float(run_s))

    def recorded_frame(self) -> pd.DataFrame | None:
        """The finished run's recorded timeseries in the live charts' columns; None before it has one."""
        try:
            requests, timeseries, _ = load_run(self.handle.out_dir)
        except TelemetryError:
            return None
        return recorded_frame(requests, timeseries)

    def summary(self) -> dict[str, Any] | None:
        """summary.json once the run has written it (read by run_files: no link, capped, bounded depth);
        None before, or when it cannot be read so."""
        try:
            doc = RunFolder(self.handle.out_dir).read_json("summary.json")
        except TelemetryError:
            return None
        return doc if isinstance(doc, dict) else None


class RunRegistry:
    """Started runs by id, newest first; thread-safe, since sessions run in their own threads."""

    def __init__(self) -> None:
        self._runs: dict[str, StartedRun] = {}
        self._lock = threading.Lock()
        self._stoppers: list[threading.Thread] = []

    def start(self, path: Path, engine: str | None, broker_url: str | None,
              overrides: tuple[str, ...] = (), out_root: Path | None = None) -> StartedRun:
        """Validate (ScenarioError names the field), refuse a second live run, then start."""
        scenario = apply_overrides(load_scenario(path), overrides)
        engine = engine or scenario.engine
        if engine not in ENGINES:
            raise RunRefused(f"engine {engine!r} is unknown; pick live or virtual")
        busy = [r.run_id for r in self.all() if r.handle.engine == "live" and r.handle.is_running]
        if engine == "live" and busy:
            raise RunRefused(f"live run {busy[0]} is still going and would share the CPUs with this one; "
                             "stop it first, or pick the virtual engine")
        run_id = new_run_id()
        out_dir = (out_root or runs_dir()) / f"{scenario.name}-{time.strftime('%Y%m%d-%H%M%S')}-{run_id}"
        handle = start_run(path, engine, broker_url, tuple(overrides), out_dir, run_id)
        started = StartedRun(handle, scenario.name, path, tuple(overrides))
        with self._lock:
            self._runs[run_id] = started
        return started

    def get(self, run_id: str | None) -> StartedRun | None:
        with self._lock:
            return self._runs.get(run_id or "")

    def all(self) -> list[StartedRun]:
        with self._lock:
            return list(reversed(self._runs.values()))

    def stop(self, run_id: str) -> bool:
        """Ctrl-C the run in the background (it fails what is open and records); False if not ours
        or already over. Never blocks the page."""
        run = self.get(run_id)
        if run is None or not run.handle.is_running:
            return False
        thread = threading.Thread(target=run.handle.stop, name=f"stop-{run_id}", daemon=True)
        thread.start()
        self._stoppers.append(thread)
        return True

    def stop_all(self) -> None:
        """Stop every run still going and wait for them (the server is exiting)."""
        for run in self.all():
            self.stop(run.run_id)
        for thread in self._stoppers:
            thread.join(40.0)


@st.cache_resource(show_spinner=False)
def get_registry() -> RunRegistry:
    registry = RunRegistry()
    atexit.register(registry.stop_all)
    return registry
