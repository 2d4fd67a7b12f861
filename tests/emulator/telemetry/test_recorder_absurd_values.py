"""One absurd value (a 400-digit threshold, an infinite float, a length past int64) must not cost a
run its record: every file is written, the value is left out (NaN/None) and the summary says so."""

from __future__ import annotations

import dataclasses
import json
import math

from emulator.telemetry.recorder import RunRecorder, load_run
from tests.emulator.telemetry.conftest import hand_made_records

HUGE = 10 ** 400  # float(HUGE) raises OverflowError


def test_a_400_digit_threshold_sample_is_recorded_as_missing(tmp_path) -> None:
    recorder = RunRecorder(tmp_path)
    for record in hand_made_records():
        recorder.add_request(record)
    recorder.add_sample(0.5, threshold_tokens=HUGE, egress_bit_per_s=3e6)
    recorder.add_sample(1.0, threshold_tokens=2048, egress_bit_per_s=math.inf)
    doc = recorder.finish({"engine": "live", "threshold_start": HUGE, "ratio": math.inf})
    requests, timeseries, loaded = load_run(tmp_path)
    assert len(requests) == 5 and loaded["summary"]["requests"] == 5
    assert math.isnan(timeseries.loc[0, "threshold_tokens"]) and timeseries.loc[0, "egress_bit_per_s"] == 3e6
    assert timeseries.loc[1, "threshold_tokens"] == 2048
    assert doc["meta"]["ratio"] is None  # JSON has no infinity
    assert any("threshold_tokens" in line for line in loaded["record_notes"])


def test_a_request_whose_length_overflows_int64_keeps_its_row(tmp_path) -> None:
    records = hand_made_records()
    records[0] = dataclasses.replace(records[0], input_len=HUGE, kv_bytes=-HUGE, ttft_s=HUGE)
    recorder = RunRecorder(tmp_path)
    for record in records:
        recorder.add_request(record)
    recorder.finish({"engine": "live"})
    requests, _, doc = load_run(tmp_path)
    assert list(requests["id"]) == [r.id for r in records]
    row = requests.iloc[0]
    assert math.isnan(row["input_len"]) or row["input_len"] is None
    assert row["status"] == "completed" and row["output_len"] == records[0].output_len
    assert any("input_len" in line for line in doc["record_notes"])
    json.loads((tmp_path / "summary.json").read_text())  # strict JSON: no NaN, no Infinity
