"""The one timeseries row: both engines record exactly its columns, rates in bit/s, and a run
recorded in Mbit/s by an earlier version reads back converted."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from emulator.scenario import parse_scenario
from emulator.telemetry.recorder import RunRecorder, load_run, snapshot_row
from emulator.telemetry.schemas import MetricsSnapshot, QueueDepths, RequestCounts
from emulator.telemetry.timeseries import COLUMNS, TimeseriesRow, frame_rate_unit, rate_unit, upgrade_timeseries
from emulator.virtual.engine import run_virtual, simulate
from tests.emulator.telemetry.conftest import hand_made_records
from tests.emulator.virtual.conftest import ROOT, SMALL

LIVE_SNAPSHOT = MetricsSnapshot(
    run_id="r1", t_s=2.0, ttft_p50_s=0.4, ttft_p90_s=0.9,
    requests=RequestCounts(arrived=5, completed=3, failed=1, in_flight=1, prfaas=2, local=3),
    queues=QueueDepths(remote_prefill=1, local_prefill=0, decode=2), egress_bit_per_s=40e6,
    link_capacity_bit_per_s=50e6, link_utilization=0.8, retrans_rate=0.01, rtt_ms=21.0,
    threshold_tokens=4096,
    roles={"remote-prefill-0": "prefill", "local-prefill-0": "prefill", "local-decode-1": "decode"},
)


def _parquet_columns(run_dir: Path) -> tuple[str, ...]:
    """The columns as written, before any upgrade on reading."""
    return tuple(pq.read_schema(run_dir / "timeseries.parquet").names)


def test_a_virtual_run_and_the_live_recording_path_write_the_same_columns(tmp_path: Path) -> None:
    virtual = simulate(parse_scenario(SMALL | {"duration_s": 5}, ROOT))
    assert all(tuple(sample) == COLUMNS for sample in virtual.samples)
    run_virtual(parse_scenario(SMALL | {"duration_s": 5}, ROOT), tmp_path / "virtual")
    live = RunRecorder(tmp_path / "live")  # what session.write_record does with the loops' snapshots
    live.add_snapshot(LIVE_SNAPSHOT)
    live.finish({"engine": "live"})
    assert _parquet_columns(tmp_path / "virtual") == _parquet_columns(tmp_path / "live") == COLUMNS


def test_the_live_row_is_the_snapshot_in_bit_per_s_and_leaves_the_unmeasured_empty() -> None:
    row = snapshot_row(LIVE_SNAPSHOT)
    assert (row.egress_bit_per_s, row.link_capacity_bit_per_s, row.link_utilization) == (40e6, 50e6, 0.8)
    assert (row.queue_remote_prefill, row.queue_decode, row.in_flight, row.completed) == (1, 2, 1, 3)
    assert row.num_local_prefill == 1  # local-prefill-0; the remote prefill node does not count
    assert row.num_decode_active is None and row.num_transfers_active is None  # not in a snapshot
    assert snapshot_row(MetricsSnapshot(run_id="r", t_s=0.0)).num_local_prefill is None  # no nodes yet


def test_a_row_names_every_column() -> None:
    with pytest.raises(TypeError, match="num_transfers_active"):
        TimeseriesRow(**{name: 0.0 for name in COLUMNS if name != "num_transfers_active"})
    row = TimeseriesRow(**{name: 1.0 for name in COLUMNS})
    assert tuple(row.as_dict()) == COLUMNS
    with pytest.raises(AttributeError):
        row.t_s = 2.0  # type: ignore[misc]


def test_an_old_frame_in_mbit_is_upgraded_to_bit_per_s() -> None:
    old = pd.DataFrame({"t_s": [0.0, 1.0], "egress_mbit": [None, 12.5], "link_capacity_mbit": [50.0, 50.0],
                        "n_p": [2.0, 3.0], "decode_active": [0.0, 4.0], "kv_cache_blocks": [7.0, 8.0]})
    new = upgrade_timeseries(old)
    assert list(new.columns) == [*COLUMNS, "kv_cache_blocks"]  # an unknown column is kept, last
    assert math.isnan(new.loc[0, "egress_bit_per_s"]) and new.loc[1, "egress_bit_per_s"] == 12.5e6
    assert new["link_capacity_bit_per_s"].tolist() == [50e6, 50e6]
    assert new["num_local_prefill"].tolist() == [2.0, 3.0] and new["num_decode_active"].tolist() == [0.0, 4.0]
    assert new["num_transfers_active"].isna().all() and new["rtt_ms"].isna().all()  # never recorded
    assert "egress_mbit" in old.columns  # the caller's frame is left as it was
    assert upgrade_timeseries(new).equals(new)  # a current frame comes back the same


def test_a_run_recorded_in_mbit_opens_with_bit_per_s(tmp_path: Path) -> None:
    recorder = RunRecorder(tmp_path)
    for record in hand_made_records():
        recorder.add_request(record)
    recorder.finish({"engine": "live"})
    old = pd.DataFrame({"t_s": [0.5], "threshold_tokens": [2048.0], "egress_mbit": [640.0],
                        "link_capacity_mbit": [1000.0]})  # as a run from before bit/s wrote it
    pq.write_table(pa.Table.from_pandas(old, preserve_index=False), tmp_path / "timeseries.parquet")
    _, timeseries, _ = load_run(tmp_path)
    assert tuple(timeseries.columns) == COLUMNS
    assert timeseries.loc[0, "egress_bit_per_s"] == 640e6 and timeseries.loc[0, "link_capacity_bit_per_s"] == 1e9


@pytest.mark.parametrize(("peak", "unit"), [(0.0, "Mbit/s"), (50e6, "Mbit/s"), (999e6, "Mbit/s"),
                                            (1e9, "Gbit/s"), (100e9, "Gbit/s"), (math.nan, "Mbit/s")])
def test_rates_show_in_mbit_or_gbit(peak: float, unit: str) -> None:
    assert rate_unit(peak)[0] == unit
    assert frame_rate_unit(pd.DataFrame({"link_capacity_bit_per_s": [None, peak]}))[0] == unit
