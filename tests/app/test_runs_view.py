"""The Runs page's tables against runs written by the real RunRecorder and worked out by hand."""

from __future__ import annotations

import io
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from app.recorded_meta import RecordedMeta
from app.runs_compare import (
    compare_cdfs,
    compare_colors,
    compare_egress,
    compare_names,
    compare_table,
    format_difference,
    format_relative,
)
from app.runs_view import (
    as_text,
    csv_bytes,
    egress_lines,
    find_run_dirs,
    first_tokens,
    format_percent,
    gantt_segments,
    link_backend,
    list_runs,
    listing_table,
    node_table,
    resolve_runs_dir,
    timeseries_lines,
    ttft_cdf,
)
from emulator.errors import TelemetryError
from emulator.telemetry.labels import format_number
from emulator.telemetry.palette import RUN_COLORS


def test_lists_runs_newest_first_and_flags_foreign_dirs(runs_dir: Path) -> None:
    listing = list_runs(runs_dir)
    assert [run.name for run in listing.runs] == ["slow-virtual", "fast-live"]
    assert [name for name, _ in listing.problems] == ["foreign"]  # "notes" has no summary.json
    assert "lacks requests.parquet, timeseries.parquet" in listing.problems[0][1]
    table = listing_table(listing)
    assert table["run"].tolist() == ["slow-virtual", "fast-live"]
    assert table["status"].tolist() == ["finished", "finished"]  # meta without `outcome`: from its end reason
    assert table["engine"].tolist() == ["virtual", "live"]
    assert table["link backend"].tolist() == ["simulated", "proxy"]  # human names, no raw keys
    assert table["requests"].tolist() == ["6", "6"] and table["failed"].tolist() == ["1", "1"]
    assert table["TTFT P90 (s)"].tolist() == ["2.24", "1.12"]  # three significant digits


def test_a_run_dir_itself_is_a_listing_of_one(runs_dir: Path) -> None:
    assert [f.path for f in find_run_dirs(runs_dir / "fast-live")] == [runs_dir / "fast-live"]
    assert [run.name for run in list_runs(runs_dir / "fast-live").runs] == ["fast-live"]


def test_missing_or_empty_directory_names_the_problem(tmp_path: Path) -> None:
    with pytest.raises(TelemetryError, match="does not exist"):
        list_runs(tmp_path / "nope")
    assert list_runs(tmp_path).runs == ()
    with pytest.raises(TelemetryError, match="empty"):
        resolve_runs_dir("  ")


def test_relative_dirs_start_at_the_repository_root(tmp_path: Path) -> None:
    assert resolve_runs_dir("runs", root=tmp_path) == tmp_path / "runs"
    assert resolve_runs_dir(str(tmp_path / "x"), root=Path("/elsewhere")) == tmp_path / "x"


def test_ttft_cdf_by_route_counts_completed_requests_only(runs_dir: Path) -> None:
    run = list_runs(runs_dir).by_name()["fast-live"]
    cdf = ttft_cdf(run.requests)
    remote = cdf[cdf["group"] == "prfaas"]
    local = cdf[cdf["group"] == "local"]
    assert remote["ttft_s"].tolist() == [1.0, 1.2]  # r6 failed: not in the CDF
    assert remote["fraction"].tolist() == [0.5, 1.0]
    assert local["ttft_s"].tolist() == pytest.approx([0.6, 0.7, 0.8])
    assert local["fraction"].tolist() == pytest.approx([1 / 3, 2 / 3, 1.0])
    everything = ttft_cdf(run.requests, by=None)
    assert set(everything["group"]) == {"all"} and len(everything) == 5


def test_gantt_segments_by_hand(runs_dir: Path) -> None:
    requests = list_runs(runs_dir).by_name()["fast-live"].requests
    seg = gantt_segments(requests).set_index(["id", "segment"])
    # r1 (remote): queue 0-0.1, prefill 0.1-0.5, KV 0.15-0.7, decode 0.7 -> 1.0 + 7 * 0.02.
    assert seg.loc[("r1", "queue"), ["start_s", "end_s"]].tolist() == pytest.approx([0.0, 0.1])
    assert seg.loc[("r1", "prefill"), ["start_s", "end_s"]].tolist() == pytest.approx([0.1, 0.5])
    assert seg.loc[("r1", "transfer"), ["start_s", "end_s"]].tolist() == pytest.approx([0.15, 0.7])
    assert seg.loc[("r1", "decode"), ["start_s", "end_s"]].tolist() == pytest.approx([0.7, 1.14])
    # r2 (local, no transfer): decode starts at prefill end.
    assert ("r2", "transfer") not in seg.index
    assert seg.loc[("r2", "decode"), "start_s"] == pytest.approx(1.0)
    # r6 failed after its prefill started: only the queue segment is known.
    assert [s for i, s in seg.index if i == "r6"] == ["queue"]
    assert (seg["duration_s"] >= 0).all()
    assert set(gantt_segments(requests, limit=2)["id"]) == {"r1", "r2"}
    assert first_tokens(requests, limit=2)["id"].tolist() == ["r1", "r2"]
    with pytest.raises(ValueError, match="at least 1"):
        gantt_segments(requests, limit=0)


def test_timeseries_lines_drop_missing_samples(runs_dir: Path) -> None:
    run = list_runs(runs_dir).by_name()["fast-live"]
    lines = timeseries_lines(run.timeseries, {"egress_bit_per_s": "egress", "link_capacity_bit_per_s": "cap",
                                              "queue_decode": "never sampled", "nope": "absent"})
    assert set(lines["series"]) == {"egress", "cap"}
    assert lines[lines["series"] == "egress"]["value"].tolist() == [0, 100e6, 200e6, 300e6, 400e6, 500e6]
    assert timeseries_lines(run.timeseries.iloc[:0], {"egress_bit_per_s": "e"}).empty


def test_egress_lines_show_the_recorded_bit_per_s_in_mbit(runs_dir: Path) -> None:
    run = list_runs(runs_dir).by_name()["fast-live"]  # egress 0..500 Mbit/s on a 1 Gbit/s link
    lines, unit = egress_lines(run.timeseries)
    assert unit == "Gbit/s"  # the capacity, 1e9 bit/s, sets the unit
    assert lines[lines["series"] == "egress"]["value"].tolist() == pytest.approx([0, 0.1, 0.2, 0.3, 0.4, 0.5])
    slow = run.timeseries.assign(link_capacity_bit_per_s=float("nan"))
    lines, unit = egress_lines(slow)
    assert unit == "Mbit/s" and set(lines["series"]) == {"egress"}
    assert lines["value"].max() == pytest.approx(500.0)


def test_a_run_recorded_in_mbit_lists_and_charts_in_bit_per_s(runs_dir: Path) -> None:
    """Runs recorded before bit/s: timeseries columns egress_mbit and link_capacity_mbit."""
    old = runs_dir / "fast-live"
    frame = pd.DataFrame({"t_s": [0.0, 0.5], "egress_mbit": [0.0, 100.0], "link_capacity_mbit": [1000.0, 1000.0]})
    pq.write_table(pa.Table.from_pandas(frame, preserve_index=False), old / "timeseries.parquet")
    run = list_runs(runs_dir).by_name()["fast-live"]
    assert run.timeseries["egress_bit_per_s"].tolist() == [0.0, 100e6]
    lines, unit = egress_lines(run.timeseries)
    assert unit == "Gbit/s" and lines[lines["series"] == "link capacity"]["value"].tolist() == [1.0, 1.0]


def test_compare_table_and_cdfs_side_by_side(runs_dir: Path) -> None:
    runs = list_runs(runs_dir).by_name()
    table = compare_table(runs)
    assert table.columns.tolist() == ["A", "B", "B - A", "B - A (%)"]  # A = slow-virtual, B = fast-live
    assert table.loc["TTFT P50 (s)"].tolist() == ["1.6", "0.8", "-0.8", "-50%"]
    assert table.loc["engine"].tolist() == ["virtual", "live", "-", "-"]
    assert table.loc["failed"].tolist() == ["1", "1", "0", "0%"]
    assert table.loc["failed: link_down"].tolist() == ["1", "1", "0", "0%"]  # failures lined up by reason
    assert table.loc["model"].tolist()[:2] == [runs["slow-virtual"].meta.model or "-",
                                                runs["fast-live"].meta.model or "-"]
    cdfs = compare_cdfs(runs)  # each run by what tells it apart: the scenario here, not its folder
    assert cdfs.groupby("group").size().to_dict() == {"fixture-1": 5, "fixture-2": 5}
    assert compare_names(runs) == {"slow-virtual": "fixture-2", "fast-live": "fixture-1"}
    assert compare_colors(runs) == {"fixture-2": RUN_COLORS[0], "fixture-1": RUN_COLORS[1]}


def test_node_table_by_hand(runs_dir: Path) -> None:
    """fast-live over 3.0 s: local-prefill-0 prefilled r2, r4, r5 (0.4 s each, queued 0.1 s each);
    remote-prefill-0 r1, r3 (r6 started, never ended, but waited 0.1 s); local-decode-0 decoded 5."""
    summary = list_runs(runs_dir).by_name()["fast-live"].summary
    table = node_table(summary)
    assert table.columns.tolist() == ["node", "role", "requests", "busy", "mean queue"]
    assert table["node"].tolist() == ["local-prefill-0", "remote-prefill-0", "local-decode-0"]
    assert table["role"].tolist() == ["prefill", "prefill", "decode"]
    assert table["requests"].tolist() == [3, 2, 5]
    assert table["busy"].tolist()[:2] == pytest.approx([1.2 / 3, 0.8 / 3])
    assert table["mean queue"].tolist()[:2] == pytest.approx([0.3 / 3, 0.3 / 3])
    assert table["busy"].isna().tolist() == [False, False, True]
    old = {k: v for k, v in summary.items() if k not in ("prefill_nodes", "decode_nodes")}
    assert node_table(old).empty and node_table(old).columns.tolist() == table.columns.tolist()


def test_compare_table_shows_the_trace_study_figures(runs_dir: Path) -> None:
    table = compare_table(list_runs(runs_dir).by_name())
    assert table.loc["offloaded (of requests)"].tolist() == ["0.5", "0.5", "0", "0%"]
    assert table.loc["prefix hit, remote"].tolist() == ["0", "0", "0", "-"]  # relative to 0: none
    assert table.loc["TTFT no-queue mean (s)"].tolist() == ["0.48", "0.48", "0", "0%"]
    assert "egress mean (Mbit/s)" in table.index and "egress (Gbit/s)" not in table.index


@pytest.mark.parametrize(("value", "text"), [
    (None, "-"), (float("nan"), "-"), (True, "-"), ("x", "-"), (0.0, "0%"), (0.915, "92%"), (1, "100%"),
])
def test_format_percent(value: object, text: str) -> None:
    assert format_percent(value) == text


@pytest.mark.parametrize(("value", "text"), [
    (None, "-"), (float("nan"), "-"), (3, "3"), (12_345, "12,345"), (0.123456, "0.123"),
    (1.5, "1.5"), (250.4, "250"), (1_234.5, "1,234"), ("proxy", "proxy"),
])
def test_format_number(value: object, text: str) -> None:
    assert format_number(value) == text


def test_link_backend_names_the_virtual_engine() -> None:
    assert link_backend(RecordedMeta.from_json({"engine": "live", "link_backend": "netem"})) == "netem"
    assert link_backend(RecordedMeta.from_json({"engine": "virtual"})) == "simulated"
    assert link_backend(RecordedMeta.from_json({})) == "unknown"


def test_csv_bytes_round_trip(runs_dir: Path) -> None:
    requests = list_runs(runs_dir).by_name()["fast-live"].requests
    back = pd.read_csv(io.BytesIO(csv_bytes(requests)))
    assert back["id"].tolist() == requests["id"].tolist()
    assert back["ttft_s"].tolist() == pytest.approx(requests["ttft_s"].tolist(), nan_ok=True)


def test_a_run_recorded_before_fail_detail_still_lists_and_compares(runs_dir: Path) -> None:
    """Runs recorded before issue 14: no fail_detail column, `fail_reasons` with live sentences."""
    import json

    old = runs_dir / "fast-live"
    table = pq.read_table(old / "requests.parquet")
    pq.write_table(table.drop_columns(["fail_detail"]), old / "requests.parquet")
    doc = json.loads((old / "summary.json").read_text())
    doc["summary"]["fail_reasons"] = {"worker lost: local-decode-0 (its process ended)": 1}
    del doc["summary"]["failed_by_reason"]
    (old / "summary.json").write_text(json.dumps(doc))
    listing = list_runs(runs_dir)
    runs = listing.by_name()
    assert "fast-live" in runs and runs["fast-live"].requests["fail_detail"].isna().all()
    table = compare_table(runs)
    assert list(runs)[0] == "fast-live"  # rewritten last, so A
    assert table.loc["failed: link_down", "B"] == "1" and table.loc["failed: link_down", "A"] == "0"
    assert table.loc["failed: link_down", "B - A"] == "+1"
    old_reason = "failed: worker lost: local-decode-0 (its process ended)"
    assert (table.loc[old_reason, "B"], table.loc[old_reason, "A"]) == ("0", "1")


def test_compare_table_differences_to_the_first_run_of_three(runs_dir: Path, make_run) -> None:
    make_run(runs_dir / "slower", scale=4.0, engine="virtual")
    runs = list_runs(runs_dir).by_name()
    assert list(runs) == ["slower", "slow-virtual", "fast-live"]
    table = compare_table(runs)
    assert table.columns.tolist()[3:] == ["B - A", "B - A (%)", "C - A", "C - A (%)"]
    assert table.loc["TTFT P50 (s)"].tolist() == ["3.2", "1.6", "0.8", "-1.6", "-50%", "-2.4", "-75%"]
    assert "None" not in table.to_numpy() and "nan" not in table.to_numpy()


@pytest.mark.parametrize(("value", "text"), [(None, "-"), (0.0, "0"), (0.8, "+0.8"), (-1234.5, "-1,234")])
def test_format_difference(value: float | None, text: str) -> None:
    assert format_difference(value) == text


@pytest.mark.parametrize(("value", "text"), [(None, "-"), (-0.5, "-50%"), (0.1234, "+12.3%"), (0.0, "0%")])
def test_format_relative(value: float | None, text: str) -> None:
    assert format_relative(value) == text


def test_compare_egress_overlays_the_runs_in_one_unit(runs_dir: Path) -> None:
    lines, unit = compare_egress(list_runs(runs_dir).by_name())  # egress 0..500 Mbit/s in both
    assert unit == "Mbit/s"
    assert set(lines["run"]) == {"fixture-1", "fixture-2"}  # fast-live is fixture-1
    assert lines[lines["run"] == "fixture-1"]["value"].tolist() == pytest.approx([0, 100, 200, 300, 400, 500])


def test_a_killed_run_folder_is_listed_as_incomplete_with_its_log_tail(runs_dir: Path) -> None:
    killed = runs_dir / "killed"
    killed.mkdir()
    (killed / "run.log").write_text("".join(f"progress: {i}/100 requests ended\n" for i in range(40)))
    failed = runs_dir / "failed"
    failed.mkdir()
    (failed / "run.log").write_text("error: link.delay_ms: -5 is negative; use 0 for no added delay\n")
    listing = list_runs(runs_dir)
    assert [run.name for run in listing.runs] == ["slow-virtual", "fast-live"]
    incomplete = {folder.name: folder for folder in listing.incomplete}
    assert set(incomplete) == {"killed", "failed"}  # "notes" has no run.log: not a run folder
    assert "stopped before it finished" in incomplete["killed"].why
    assert incomplete["killed"].log_tail.splitlines() == [f"progress: {i}/100 requests ended" for i in range(20, 40)]
    assert incomplete["failed"].why == ("no summary.json: the run ended with an error "
                                        "(error: link.delay_ms: -5 is negative; use 0 for no added delay)")
    table = listing_table(listing).set_index("run")
    assert table.loc["killed", "status"] == "incomplete" and table.loc["fast-live", "status"] == "finished"
    assert table.loc["killed", "TTFT P50 (s)"] == "-"


def test_as_text_rounds_and_shows_a_dash_for_missing(runs_dir: Path) -> None:
    nodes = as_text(node_table(list_runs(runs_dir).by_name()["fast-live"].summary), percent=("busy",))
    assert nodes["busy"].tolist() == ["40%", "27%", "-"]
    assert nodes["mean queue"].tolist() == ["0.1", "0.1", "-"]
    assert nodes["requests"].tolist() == ["3", "2", "5"]
    frame = pd.DataFrame({"TTFT P50 (s)": [6.2785, None], "x": [12_345.0, float("nan")]})
    assert as_text(frame).to_dict("list") == {"TTFT P50 (s)": ["6.28", "-"], "x": ["12,345", "-"]}
