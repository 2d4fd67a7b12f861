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
from emulator.errors import ScenarioError
from emulator.net.names import new_run_id
from emulator.paths import REPO_ROOT, SCENARIOS_DIR
from emulator.scenario import load_scenario


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


@dataclass
class RunHandle:
    """A run in a child process: its id (MQTT topics `prfaas/<run_id>/...`), output and log."""

    run_id: str
    engine: str
    out_dir: Path
    log_path: Path
    broker_url: str | None
    process: subprocess.Popen = field(repr=False)
    started_at: float = field(default_factory=time.monotonic)

    @property
    def is_running(self) -> bool:
        return self.process.poll() is None

    @property
    def returncode(self) -> int | None:
        return self.process.poll()

    def log_tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def stop(self, grace_s: float = 15.0, hurry_s: float = 5.0) -> int:
        """Ctrl-C, as a terminal would: open requests end failed, the record is written, everything is
        torn down (within about 10 s: each teardown step has a budget). Should it take longer than
        `grace_s`, a second SIGINT hurries the teardown; only after `hurry_s` more is it killed."""
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


def start_run(scenario: Path, engine: str | None = None, broker_url: str | None = None,
              overrides: tuple[str, ...] = (), out_dir: Path | None = None, run_id: str | None = None) -> RunHandle:
    """Validate `scenario` (ScenarioError names the problem), then run it in the background."""
    sc = load_scenario(scenario)
    engine = engine or sc.engine
    run_id = run_id or new_run_id()
    out_dir = out_dir or paths.runs_dir() / f"{sc.name}-{time.strftime('%Y%m%d-%H%M%S')}-{run_id}"
    out_dir.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-m", "emulator", "-v", "run", str(scenario), "--engine", engine,
               "--out", str(out_dir), "--run-id", run_id,
               *(["--broker", broker_url] if broker_url else ["--no-broker"])]
    for item in overrides:
        command += ["--set", item]
    log_path = out_dir / "run.log"
    with open(log_path, "wb") as log_file:
        process = subprocess.Popen(command, cwd=REPO_ROOT, stdout=log_file, stderr=subprocess.STDOUT,
                                   stdin=subprocess.DEVNULL)
    return RunHandle(run_id, engine, out_dir, log_path, broker_url, process)
