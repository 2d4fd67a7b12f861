"""A run's directory: four files written atomically, read back equal, a self-contained report."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from emulator.errors import TelemetryError
from emulator.telemetry.recorder import FILES, TIMESERIES_COLUMNS, RunRecorder, load_run
from emulator.telemetry.records import RequestRecord
from emulator.telemetry.report import NODES_TITLE, TITLES
from emulator.telemetry.schemas import MetricsSnapshot, QueueDepths, RequestCounts

META = {"engine": "live", "scenario": "live-quickstart", "link_backend": "tun",
        "link_note": "link backend: tun (netem unavailable: kernel lacks sch_netem)",
        "mqtt_note": "mqtt: connected to mqtt://127.0.0.1:1883"}


def recorded_run(out: Path, records: list[RequestRecord]) -> dict:
    recorder = RunRecorder(out)
    for record in records:
        recorder.add_request(record)
    recorder.add_sample(0.5, threshold_tokens=4096, egress_bit_per_s=0.0, link_capacity_bit_per_s=1e9,
                        queue_decode=0, ttft_p50_s=None, num_decode_active=12)
    recorder.add_snapshot(MetricsSnapshot(
        run_id="r", t_s=1.0, ttft_p50_s=0.3, ttft_p90_s=0.9,
        requests=RequestCounts(arrived=3, completed=1, in_flight=2),
        queues=QueueDepths(remote_prefill=2, decode=1), egress_bit_per_s=640e6,
        link_capacity_bit_per_s=1e9, link_utilization=0.64, threshold_tokens=8192,
        roles={"remote-prefill-0": "prefill", "local-prefill-0": "prefill", "local-prefill-1": "prefill",
               "local-decode-2": "decode"}))
    return recorder.finish(META, expect={"ttft_p90_s": {"max": 0.5}}, duration_s=10.0)


def test_run_dir_round_trip(tmp_path: Path, records: list[RequestRecord],
                            design_fields: tuple[str, ...]) -> None:
    doc = recorded_run(tmp_path / "run", records)
    out = tmp_path / "run"
    assert sorted(p.name for p in out.iterdir()) == sorted(FILES)  # no temporary leftovers
    table = pq.read_table(out / "requests.parquet")
    assert tuple(table.column_names) == design_fields
    assert table.to_pylist() == [asdict(r) for r in records]

    requests, timeseries, summary = load_run(out)
    assert tuple(requests.columns) == design_fields and len(requests) == len(records)
    assert summary == json.loads((out / "summary.json").read_text()) == doc
    assert summary["summary"]["ttft_p90_s"] == pytest.approx(0.88)
    assert summary["meta"] == META
    assert summary["expect_failures"] == ["ttft_p90_s = 0.88 > max 0.5"]

    assert list(timeseries.columns) == list(TIMESERIES_COLUMNS)
    assert timeseries["t_s"].tolist() == [0.5, 1.0]
    assert timeseries["threshold_tokens"].tolist() == [4096.0, 8192.0]
    assert timeseries["egress_bit_per_s"].tolist() == [0.0, 640e6]
    assert timeseries["queue_remote_prefill"].isna().tolist() == [True, False]
    assert timeseries["in_flight"].tolist()[1] == 2.0
    assert timeseries["num_decode_active"].tolist()[0] == 12.0
    assert timeseries["num_local_prefill"].tolist()[1] == 2.0  # the snapshot's local prefill roles


def test_empty_run_still_writes_valid_files(tmp_path: Path,
                                            design_fields: tuple[str, ...]) -> None:
    doc = RunRecorder(tmp_path).finish({"engine": "virtual"})
    requests, timeseries, summary = load_run(tmp_path)
    assert tuple(requests.columns) == design_fields and requests.empty
    assert list(timeseries.columns) == list(TIMESERIES_COLUMNS) and timeseries.empty
    assert summary == doc and summary["summary"]["requests"] == 0
    assert summary["expect_failures"] == []
    page = (tmp_path / "report.html").read_text()
    assert page.count("no data") >= len(TITLES)


def test_report_is_self_contained_with_every_chart(tmp_path: Path,
                                                   records: list[RequestRecord]) -> None:
    recorded_run(tmp_path, records)
    page = (tmp_path / "report.html").read_text()
    for title in TITLES.values():
        assert title in page
    assert page.count("* plotly.js v") == 1  # the library inlined once, not per chart
    assert page.count("Plotly.newPlot(") == len(TITLES)
    assert "<script src=" not in page and "<link " not in page  # nothing fetched at view time
    assert "expect failed: ttft_p90_s = 0.88 &gt; max 0.5" in page
    assert "netem unavailable" in page


def test_report_shows_egress_in_its_unit_and_the_node_table(tmp_path: Path,
                                                            records: list[RequestRecord]) -> None:
    recorded_run(tmp_path, records)  # 1.5 GB of remote KV over 10 s
    page = (tmp_path / "report.html").read_text()
    assert "<th>egress mean</th><td>1.2 Gbit/s</td>" in page
    assert "egress_gbps_mean" not in page  # shown once, in its unit
    assert "the paper&#x27;s Table 6 TTFT" in page and "<th>TTFT no-queue P90 (s)</th>" in page
    assert f"<h2>{NODES_TITLE}</h2>" in page
    assert "<tr><td>local-prefill-0</td><td>prefill</td><td>2</td><td>1.8%</td><td>0.002</td></tr>" in page
    assert "<tr><td>local-decode-0</td><td>decode</td><td>3</td><td></td><td></td></tr>" in page
    slow = RunRecorder(tmp_path / "slow")
    slow.add_request(records[0])  # 1 GB over 1000 s: 8 Mbit/s, not 0.008 Gbit/s
    slow.finish(META, duration_s=1000.0)
    assert "<th>egress mean</th><td>8 Mbit/s</td>" in (tmp_path / "slow" / "report.html").read_text()


def test_sample_values_must_be_numbers(tmp_path: Path) -> None:
    with pytest.raises(TelemetryError, match="threshold_tokens = "):
        RunRecorder(tmp_path).add_sample(1.0, threshold_tokens="4096")


def test_a_column_outside_the_row_definition_is_refused(tmp_path: Path) -> None:
    """Both engines record exactly TimeseriesRow's columns: an engine's own extra is refused."""
    with pytest.raises(TelemetryError, match="'kv_cache_blocks' is not a TimeseriesRow column"):
        RunRecorder(tmp_path).add_sample(1.0, kv_cache_blocks=12)


def test_load_run_refuses_missing_and_foreign_directories(tmp_path: Path,
                                                          records: list[RequestRecord]) -> None:
    with pytest.raises(TelemetryError, match="does not exist"):
        load_run(tmp_path / "nope")
    with pytest.raises(TelemetryError, match="lacks requests.parquet, timeseries.parquet"):
        load_run(tmp_path)
    recorded_run(tmp_path, records)
    (tmp_path / "summary.json").write_text('{"name": "something else"}')
    with pytest.raises(TelemetryError, match="not a v1 prfaas-run summary"):
        load_run(tmp_path)
    (tmp_path / "summary.json").write_text("{not json")
    with pytest.raises(TelemetryError, match="summary.json is unreadable"):
        load_run(tmp_path)
    (tmp_path / "requests.parquet").write_bytes(b"PAR1 junk")
    RunRecorder(tmp_path / "other").finish({})
    (tmp_path / "summary.json").write_text((tmp_path / "other" / "summary.json").read_text())
    with pytest.raises(TelemetryError, match="parquet file is unreadable"):
        load_run(tmp_path)
