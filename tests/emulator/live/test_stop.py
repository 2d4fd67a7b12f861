"""Stopping a live run is a designed path: `python -m emulator run` gets SIGINT at awkward moments
(a transfer on a just-slowed link, right after a flood of knobs, the drain, a broker that was killed
and came back) and must exit promptly with a complete record in which every arrived request ended.

Each case spawns the command line as a user would, on the tiny preset and a few seconds of traffic.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
import yaml

from emulator.net.ledger import sweep
from emulator.net.names import new_run_id
from emulator.telemetry.broker import free_port
from emulator.telemetry.watch import TopicWatch
from tests.emulator.conftest import MOSQUITTO, wait_accepting

pytestmark = [pytest.mark.root,
              pytest.mark.skipif(os.geteuid() != 0, reason="needs root: namespaces and TUN need CAP_NET_ADMIN")]
REPO_ROOT = Path(__file__).resolve().parents[3]
EXIT_WITHIN_S = 10.0  # the acceptance bound: from the signal to the process's exit
START_WITHIN_S = 90.0


def write_scenario(path: Path, duration_s: float, link_at_s: float | None, output_tokens: int = 8,
                   rate_per_s: float = 3.0) -> Path:
    data = {
        "name": "stop-test", "engine": "live", "seed": 3, "duration_s": duration_s,
        "model": {"preset": "kimi-linear-mini", "size": "tiny"},
        "clusters": {"remote": {"instances": 1, "device": "cpu"},
                     "local": {"instances": 2, "device": "cpu", "prefill_instances": 1, "decode_max_batch": 8}},
        "link": {"bandwidth_mbit": 200, "delay_ms": 10},
        "router": {"policy": "prfaas", "threshold_tokens": 1024},
        "scheduler": {"short_term": {"enabled": False}, "long_term": {"enabled": False}},
        "prefix_cache": {"block_tokens": 64, "capacity_mib": {"remote": 64, "local": 64}},
        "workload": {"arrival": {"kind": "poisson", "rate_per_s": rate_per_s},
                     "input_len": {"kind": "uniform", "min": 512, "max": 8192},
                     "output_len": {"kind": "fixed", "tokens": output_tokens}},
        "timeline": [{"at_s": link_at_s, "link": {"bandwidth_mbit": 30}}] if link_at_s is not None else [],
    }
    path.write_text(yaml.safe_dump(data))
    return path


class CliRun:
    """`python -m emulator -v run` in the background, its log in `out/../run.log`."""

    def __init__(self, scenario: Path, out: Path, broker_url: str | None = None) -> None:
        self.out, self.run_id = out, new_run_id()
        self.log_path = out.parent / f"{out.name}.log"
        command = [sys.executable, "-m", "emulator", "-v", "run", str(scenario), "--out", str(out),
                   "--link-backend", "tun", "--run-id", self.run_id,
                   *(["--broker", broker_url] if broker_url else [])]
        with open(self.log_path, "wb") as log_file:
            self.proc = subprocess.Popen(command, cwd=REPO_ROOT, stdout=log_file,
                                         stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_for_log(self, text: str, timeout_s: float = START_WITHIN_S) -> None:
        deadline = time.monotonic() + timeout_s
        while text not in self.log():
            assert self.proc.poll() is None, f"run exited with {self.proc.returncode} before {text!r}:\n{self.log()}"
            assert time.monotonic() < deadline, f"no {text!r} after {timeout_s:g} s:\n{self.log()}"
            time.sleep(0.1)

    def interrupt(self) -> float:
        """SIGINT; returns the seconds until the process exited (it is killed, and the test fails,
        when it has not exited within EXIT_WITHIN_S)."""
        sent = time.monotonic()
        self.proc.send_signal(signal.SIGINT)
        try:
            self.proc.wait(EXIT_WITHIN_S)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
            pytest.fail(f"still running {EXIT_WITHIN_S:g} s after SIGINT (killed):\n{self.log()[-3000:]}")
        return time.monotonic() - sent

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        sweep(self.run_id, force=True)


def assert_complete_record(out: Path) -> tuple[pd.DataFrame, dict]:
    """requests.parquet and summary.json are there; every arrived request ended, a failure with a reason."""
    requests = pd.read_parquet(out / "requests.parquet")
    doc = json.loads((out / "summary.json").read_text())
    assert doc["summary"]["requests"] == len(requests)
    assert set(requests["status"]) <= {"completed", "failed"}
    failed = requests[requests["status"] == "failed"]
    assert failed["fail_reason"].notna().all() and (failed["fail_reason"].str.len() > 0).all()
    assert doc["meta"]["engine_details"]["record"] == "complete"
    steps = [entry["step"] for entry in doc["meta"]["engine_details"]["teardown"]]
    assert "stop workers" in steps and "restore and remove the link" in steps
    assert doc["meta"]["run_id"] and doc["meta"]["end_reason"]
    return requests, doc


@pytest.fixture
def cli_runs():
    runs: list[CliRun] = []
    yield runs
    for run in runs:
        run.close()


@pytest.mark.parametrize("after_link_s", [1.0, 2.5, 4.0])
def test_sigint_during_a_transfer_on_the_slowed_link(tmp_path: Path, cli_runs, after_link_s: float) -> None:
    scenario = write_scenario(tmp_path / "sc.yaml", duration_s=30.0, link_at_s=1.0)
    run = CliRun(scenario, tmp_path / "run")
    cli_runs.append(run)
    run.wait_for_log("timeline: link -> 30 Mbit/s")
    time.sleep(after_link_s)
    run.interrupt()
    requests, doc = assert_complete_record(tmp_path / "run")
    assert len(requests) > 0 and (doc["meta"]["outcome"], doc["meta"]["stopped_by"]) == ("stopped", "SIGINT")


def test_sigint_right_after_a_flood_of_knobs_keeps_the_timeseries_bounded(tmp_path: Path, cli_runs,
                                                                         embedded_broker) -> None:
    scenario = write_scenario(tmp_path / "sc.yaml", duration_s=30.0, link_at_s=None)
    run = CliRun(scenario, tmp_path / "run", embedded_broker.url)
    cli_runs.append(run)
    run.wait_for_log("running")
    started = time.monotonic()
    with TopicWatch(embedded_broker.url, f"prfaas/{run.run_id}/status") as watch:
        for i in range(300):
            watch.publish(f"prfaas/{run.run_id}/control/threshold", {"v": 1, "tokens": 1024 + i})
        watch.publish(f"prfaas/{run.run_id}/control/link", {"v": 1, "bandwidth_mbit": 30})
        watch.wait_for(f"prfaas/{run.run_id}/status", lambda s: "link ->" in s.get("note", ""), timeout_s=30)
    ran_s = time.monotonic() - started
    run.interrupt()
    _, doc = assert_complete_record(tmp_path / "run")
    assert sum("control: threshold" in line for line in doc["meta"]["knob_changes"]) == 300
    timeseries = pd.read_parquet(tmp_path / "run" / "timeseries.parquet")
    # one sample per 0.5 s metrics period (plus the first and the last), however many knobs came
    assert len(timeseries) <= (ran_s + EXIT_WITHIN_S) / 0.5 + 3 < 300


def test_sigint_during_the_drain(tmp_path: Path, cli_runs) -> None:
    scenario = write_scenario(tmp_path / "sc.yaml", duration_s=2.0, link_at_s=0.5, output_tokens=200,
                              rate_per_s=4.0)
    run = CliRun(scenario, tmp_path / "run")
    cli_runs.append(run)
    run.wait_for_log("timeline: link -> 30 Mbit/s")
    time.sleep(2.5)  # arrivals are over; long outputs are still decoding
    run.interrupt()
    assert_complete_record(tmp_path / "run")


def test_chaos_link_change_broker_killed_and_restarted_then_sigint(tmp_path: Path, cli_runs) -> None:
    """The acceptance test: exits within 10 s of SIGINT with a record in which every request ended."""
    if MOSQUITTO is None:
        pytest.skip("mosquitto is not installed (apt-get install mosquitto)")
    port = free_port()
    conf = tmp_path / "mosquitto.conf"
    conf.write_text(f"listener {port} 127.0.0.1\nallow_anonymous true\npersistence false\n")

    def start_broker() -> subprocess.Popen:
        proc = subprocess.Popen([MOSQUITTO, "-c", str(conf)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_accepting(port, proc)
        return proc

    broker = start_broker()
    try:
        scenario = write_scenario(tmp_path / "sc.yaml", duration_s=30.0, link_at_s=1.0)
        run = CliRun(scenario, tmp_path / "run", f"mqtt://127.0.0.1:{port}")
        cli_runs.append(run)
        run.wait_for_log("timeline: link -> 30 Mbit/s")
        broker.kill()
        broker.wait(10)
        run.wait_for_log("mqtt: broker")  # the run noticed the outage and goes on
        time.sleep(1.0)
        broker = start_broker()
        run.wait_for_log("mqtt: reconnected", timeout_s=30)
        time.sleep(1.0)
        run.interrupt()
    finally:
        broker.kill()
        broker.wait(10)
    requests, doc = assert_complete_record(tmp_path / "run")
    assert len(requests) > 0
    assert "lost it" in doc["meta"]["engine_details"]["mqtt"] or "reconnected" in run.log()
