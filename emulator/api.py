"""The run API the dashboard uses, the same one as the command line: start a scenario as a
`python -m emulator run` child process, watch it, stop it; list scenarios and recorded runs.

A run started here is an ordinary CLI run, so whatever the dashboard can do a script can repeat.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from emulator import paths
from emulator.errors import RunFileError, ScenarioError
from emulator.net.names import check_run_id, new_run_id
from emulator.paths import REPO_ROOT, SCENARIOS_DIR
from emulator.scenario import load_scenario
from emulator.telemetry.run_files import RunFolder

SWEEPS_DIR = SCENARIOS_DIR / "sweeps"
PROGRESS_EVERY_S = 0.5  # a dashboard run logs its progress this often: the Live page reads it back


@dataclass(frozen=True, slots=True)
class ScenarioInfo:
    path: Path
    name: str
    engine: str
    description: str


def list_scenarios(directory: Path = SCENARIOS_DIR) -> list[ScenarioInfo]:
    """Every valid scenario file in `directory`, by file name; invalid files are left out."""
    found = []
    for path in sorted(directory.glob("*.yaml")):
        try:
            sc = load_scenario(path)
        except ScenarioError:
            continue
        found.append(ScenarioInfo(path, sc.name, sc.engine, sc.description))
    return found


def live_capability() -> tuple[bool, str]:
    """Whether live runs get real namespaces here, and what they fall back to otherwise."""
    if os.geteuid() == 0:
        return True, "root: live runs use network namespaces and the netem or tun link"
    return False, "not root: live runs use the proxy link backend (no packet loss), or pick the virtual engine"


class _ChildProcess:
    """What a run and a sweep started as `python -m emulator` children share: whether it still
    runs, its exit code, its log's tail, and stopping it as Ctrl-C in a terminal would."""

    process: subprocess.Popen
    log_path: Path

    @property
    def is_running(self) -> bool:
        return self.process.poll() is None

    @property
    def returncode(self) -> int | None:
        return self.process.poll()

    def log_tail(self, lines: int = 20) -> str:
        """The log's last `lines` lines, read from its tail only and never through a link (run_files);
        the one-line reason instead when it cannot be read so; "" before it exists."""
        folder = RunFolder(self.log_path.parent)
        try:
            text = folder.read_tail(self.log_path.name)
        except RunFileError as err:
            return str(err) if os.path.lexists(self.log_path) else ""  # lexists: the link itself
        return "\n".join(text.splitlines()[-lines:])

    def stop(self, grace_s: float = 15.0, hurry_s: float = 5.0) -> int:
        """Ctrl-C, as a terminal would: a run fails what is open and writes its record, a sweep keeps
        every finished point (each within about 10 s). Should it take longer than `grace_s`, a
        second SIGINT hurries it; only after `hurry_s` more is it killed."""
        for sig, wait_s in ((signal.SIGINT, grace_s), (signal.SIGINT, hurry_s)):
            if not self.is_running:
                break
            self.process.send_signal(sig)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(wait_s)
        if self.is_running:
            self.process.kill()
            self.process.wait(5)
        return self.process.returncode


@dataclass
class RunHandle(_ChildProcess):
    """A run in a child process: its id (MQTT topics `prfaas/<run_id>/...`), output and log."""

    run_id: str
    engine: str
    out_dir: Path
    log_path: Path
    broker_url: str | None
    process: subprocess.Popen = field(repr=False)
    started_at: float = field(default_factory=time.monotonic)


@dataclass
class SweepHandle(_ChildProcess):
    """A sweep in a child process (`python -m emulator sweep`): its directory and log."""

    name: str
    out_dir: Path
    log_path: Path
    process: subprocess.Popen = field(repr=False)
    started_at: float = field(default_factory=time.monotonic)


def start_run(scenario: Path, engine: str | None = None, broker_url: str | None = None,
              overrides: tuple[str, ...] = (), out_dir: Path | None = None, run_id: str | None = None) -> RunHandle:
    """Validate the run id (RunIdError: 6 lowercase hex digits, never a path) and `scenario`
    (ScenarioError names the problem), then run it in the background."""
    run_id = new_run_id() if run_id is None else check_run_id(run_id, "run_id")
    sc = load_scenario(scenario)
    engine = engine or sc.engine
    out_dir = out_dir or paths.runs_dir() / f"{sc.name}-{time.strftime('%Y%m%d-%H%M%S')}-{run_id}"
    out_dir.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-m", "emulator", "-v", "run", str(scenario), "--engine", engine,
               "--out", str(out_dir), "--run-id", run_id, "--progress-every", str(PROGRESS_EVERY_S),
               *(["--broker", broker_url] if broker_url else ["--no-broker"])]
    for item in overrides:
        command += ["--set", item]
    log_path = out_dir / "run.log"
    with open(log_path, "wb") as log_file:
        process = subprocess.Popen(command, cwd=REPO_ROOT, stdout=log_file, stderr=subprocess.STDOUT,
                                   stdin=subprocess.DEVNULL)
    return RunHandle(run_id, engine, out_dir, log_path, broker_url, process)


def list_sweep_files(directory: Path = SWEEPS_DIR) -> list[Path]:
    """The sweep files shipped with the project (scenarios/sweeps/*.yaml), by name."""
    return sorted(directory.glob("*.yaml"))


def start_sweep(sweep_file: Path, out_dir: Path | None = None, workers: int | None = None) -> SweepHandle:
    """Start `python -m emulator sweep` in the background (the file is checked by the child: a bad
    one ends it at once with its one-line reason in the log). A directory that already holds part
    of the same sweep is resumed."""
    name = sweep_file.stem
    out_dir = out_dir or paths.runs_dir() / "sweeps" / f"{name}-{time.strftime('%Y%m%d-%H%M%S')}"
    out_dir.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-m", "emulator", "sweep", str(sweep_file), "--out", str(out_dir),
               *(["--workers", str(workers)] if workers else [])]
    log_path = out_dir / "sweep.log"
    with open(log_path, "ab") as log_file:
        process = subprocess.Popen(command, cwd=REPO_ROOT, stdout=log_file, stderr=subprocess.STDOUT,
                                   stdin=subprocess.DEVNULL)
    return SweepHandle(name, out_dir, log_path, process)
