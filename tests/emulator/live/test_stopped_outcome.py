"""A live run stopped with SIGTERM from the command line ends `stopped` wherever it says how it ended:
the bus's last status, summary.json (outcome, who, when) and the exit status (143 = 128 + SIGTERM).
What was open failed `interrupted` naming the signal, and the `expect:` bound the cut-short run
misses is not judged, in words. The same tiny run as test_stop.py, on the tun link."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from emulator.telemetry.outcome import stopped_reason
from emulator.telemetry.watch import TopicWatch
from tests.emulator.live.test_stop import EXIT_WITHIN_S, CliRun, assert_complete_record, write_scenario

pytestmark = [pytest.mark.root, pytest.mark.slow,
              pytest.mark.skipif(os.geteuid() != 0, reason="needs root: namespaces and TUN need CAP_NET_ADMIN")]
FINAL_STATES = ("finished", "stopped", "failed")


def test_sigterm_ends_a_live_run_stopped_and_unjudged(tmp_path: Path, embedded_broker) -> None:
    scenario = write_scenario(tmp_path / "sc.yaml", duration_s=30.0, link_at_s=None, rate_per_s=4.0,
                              output_tokens=400)  # seconds of decode each: some are open at the signal
    data = yaml.safe_load(scenario.read_text())
    scenario.write_text(yaml.safe_dump({**data, "expect": {"completed_fraction": {"min": 1.0}}}))
    run = CliRun(scenario, tmp_path / "run", embedded_broker.url)
    status_topic = f"prfaas/{run.run_id}/status"
    try:
        with TopicWatch(embedded_broker.url, status_topic) as watch:
            run.wait_for_log(": running")
            time.sleep(3.0)  # requests in flight at 4 req/s
            run.proc.send_signal(signal.SIGTERM)
            try:
                code = run.proc.wait(EXIT_WITHIN_S)
            except subprocess.TimeoutExpired:
                pytest.fail(f"still running {EXIT_WITHIN_S:g} s after SIGTERM:\n{run.log()[-3000:]}")
            final = watch.wait_for(status_topic, lambda s: s.get("state") in FINAL_STATES, timeout_s=5)
    finally:
        run.close()
    log = run.log()
    assert code == 143, log[-3000:]
    requests, doc = assert_complete_record(tmp_path / "run")
    meta, summary = doc["meta"], doc["summary"]
    assert (meta["outcome"], meta["stopped_by"]) == ("stopped", "SIGTERM")
    interrupted = requests[requests["fail_reason"] == "interrupted"]
    assert len(interrupted) > 0 and summary["completed_fraction"] < 1.0  # the bound would fail if judged
    assert set(interrupted["fail_detail"]) == {"the run was stopped (SIGTERM) before this request ended"}
    assert meta["end_reason"] == stopped_reason("SIGTERM", meta["stopped_at_s"], len(interrupted))
    assert (doc["expect_status"], doc["expect_failures"]) == ("not_judged", [])
    assert f"  expect: {doc['expect_note']}" in log and "FAILED" not in log
    assert final["state"] == "stopped", final
    assert final["note"].startswith(f"{summary['completed']} completed, {summary['failed_count']} failed; stopped at")
