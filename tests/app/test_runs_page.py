"""The Runs page headless (AppTest): lists fixture runs, opens one, compares two, refuses bad dirs."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from streamlit.testing.v1 import AppTest

from app.table_fit import PAGE_PX, natural_px
from emulator.telemetry.palette import RUN_COLORS

PAGE = Path(__file__).resolve().parents[2] / "app" / "pages" / "2_Runs.py"


def _page(runs_dir: Path | str | None = None) -> AppTest:
    app = AppTest.from_file(str(PAGE), default_timeout=30).run()
    assert not app.exception, [e.message for e in app.exception]
    if runs_dir is not None:
        app.text_input(key="runs_dir").set_value(str(runs_dir)).run()
        assert not app.exception, [e.message for e in app.exception]
    return app


def _charts(app: AppTest) -> dict[str, dict]:
    """Plotly figures by their Streamlit key (the element id ends with `-<key>`)."""
    return {c.proto.id.split("-", 2)[2]: json.loads(c.proto.spec) for c in app.get("plotly_chart")}


def _metrics(app: AppTest) -> dict[str, str]:
    return {m.label: m.value for m in app.metric}


def _compare_table(app: AppTest) -> pd.DataFrame:
    """The comparison: the one table indexed by metric."""
    return next(d.value for d in app.dataframe if d.value.index.name == "metric")


NEW_FIGURES = ("ttft_noqueue_mean_s", "ttft_noqueue_p50_s", "ttft_noqueue_p90_s", "prfaas_input_token_fraction",
               "prefix_hit_fraction", "prefix_hit_fraction_remote", "prefix_hit_fraction_local",
               "egress_bit_per_s_mean", "prefill_nodes", "decode_nodes")


def _make_old(run_dir: Path) -> None:
    """summary.json as recorded before issue 15: none of the trace-study figures."""
    doc = json.loads((run_dir / "summary.json").read_text())
    for key in NEW_FIGURES:
        del doc["summary"][key]
    (run_dir / "summary.json").write_text(json.dumps(doc))


def test_renders_with_the_default_directory() -> None:
    app = _page()
    assert app.title[0].value == "Runs"
    assert app.text_input(key="runs_dir").value == "runs"
    assert not app.error  # a missing default runs/ is a hint, not an error


def test_lists_fixture_runs_and_flags_the_foreign_one(runs_dir: Path) -> None:
    app = _page(runs_dir)
    assert app.dataframe[0].value["run"].tolist() == ["slow-virtual", "fast-live"]
    assert app.dataframe[0].value["status"].tolist() == ["finished", "finished"]
    warnings = " ".join(w.value for w in app.warning)
    assert "`foreign`" in warnings and "lacks requests.parquet" in warnings
    assert app.selectbox(key="runs_open").options == ["slow-virtual", "fast-live"]


def test_opens_a_run_with_summary_charts_and_downloads(runs_dir: Path) -> None:
    app = _page(runs_dir)
    app.selectbox(key="runs_open").set_value("fast-live").run()
    assert not app.exception
    metrics = _metrics(app)
    assert metrics["Engine"] == "live" and metrics["Scenario"] == "fixture-1"
    assert metrics["Link backend"] == "proxy"
    assert (metrics["Completed"], metrics["Failed"]) == ("5", "1")
    assert (metrics["TTFT P50 (s)"], metrics["TTFT P90 (s)"]) == ("0.8", "1.12")
    # prefill 0.4 s, and 0.2 s of KV after it on the remote ones (r1, r3): 0.6, 0.4, 0.6, 0.4, 0.4
    assert (metrics["TTFT no-queue mean (s)"], metrics["TTFT no-queue P90 (s)"]) == ("0.48", "0.6")
    # 3 of 6 requests, 17,000 of 18,500 input tokens; nothing cached
    assert metrics["Offloaded (requests / tokens)"] == "50% / 92%"
    assert (metrics["Prefix hit"], metrics["Prefix hit (remote / local)"]) == ("0%", "0% / 0%")
    assert metrics["Egress mean"] == "5.33 Mbit/s"  # 2 MB of remote KV over 3 s, not 0.00533 Gbit/s
    nodes = app.dataframe[1].value
    assert nodes["node"].tolist() == ["local-prefill-0", "remote-prefill-0", "local-decode-0"]
    assert nodes["requests"].tolist() == ["3", "2", "5"]  # r6's prefill never ended
    assert nodes["busy"].tolist() == ["40%", "27%", "-"]  # 1.2 and 0.8 s of 3 s; a decode node has none
    assert nodes["mean queue"].tolist() == ["0.1", "0.1", "-"]
    assert "link backend: proxy (no root)" in [c.value for c in app.caption]
    assert any("TTFT P90 (s): 1.12, bound max 1: FAILED" in w.value for w in app.warning)  # in words

    charts = _charts(app)
    assert {"ttft_cdf", "egress", "gantt", "threshold"} <= set(charts)
    assert sorted(t["name"] for t in charts["ttft_cdf"]["data"]) == ["local", "prfaas"]
    gantt_names = [t["name"] for t in charts["gantt"]["data"]]
    assert gantt_names == ["queue", "prefill", "transfer", "decode", "first token"]
    assert sorted(t["name"] for t in charts["egress"]["data"]) == ["egress", "link capacity"]
    assert charts["egress"]["layout"]["yaxis"]["title"]["text"] == "Gbit/s"  # recorded in bit/s

    buttons = {b.key for b in app.get("download_button")}
    assert buttons == {"runs_dl_parquet", "runs_dl_requests_csv", "runs_dl_timeseries_csv", "runs_dl_report"}


@pytest.mark.slow
def test_opens_a_run_recorded_in_mbit(runs_dir: Path) -> None:
    """A run written before bit/s (timeseries column egress_mbit) still opens, its egress charted."""
    frame = pd.DataFrame({"t_s": [0.0, 0.5], "egress_mbit": [10.0, 40.0], "link_capacity_mbit": [50.0, 50.0]})
    pq.write_table(pa.Table.from_pandas(frame, preserve_index=False), runs_dir / "fast-live" / "timeseries.parquet")
    app = _page(runs_dir)
    app.selectbox(key="runs_open").set_value("fast-live").run()
    assert not app.exception, [e.message for e in app.exception]
    egress = _charts(app)["egress"]
    assert egress["layout"]["yaxis"]["title"]["text"] == "Mbit/s"
    assert {t["name"] for t in egress["data"]} == {"egress", "link capacity"}


@pytest.mark.slow
def test_opens_and_compares_a_run_recorded_before_the_trace_study_figures(runs_dir: Path) -> None:
    _make_old(runs_dir / "fast-live")
    app = _page(runs_dir)
    app.selectbox(key="runs_open").set_value("fast-live").run()
    assert not app.exception, [e.message for e in app.exception]
    metrics = _metrics(app)
    assert metrics["TTFT no-queue mean (s)"] == "-" and metrics["Prefix hit"] == "-"
    assert metrics["Offloaded (requests / tokens)"] == "50% / -"
    assert metrics["Egress mean"] == "5.33 Mbit/s"  # from egress_gbps_mean
    assert any("recorded before they existed" in c.value for c in app.caption)
    table = _compare_table(app)
    assert table.loc["prefix hit (cached/input)", "A"] == "-"  # fast-live, rewritten last, is A
    assert table.loc["prefix hit (cached/input)", "B"] == "0"
    assert table.loc["egress mean (Mbit/s)", "A"] == "5.33"


def test_compares_two_runs(runs_dir: Path) -> None:
    app = _page(runs_dir)
    assert app.multiselect(key="runs_compare").value == ["slow-virtual", "fast-live"]
    table = _compare_table(app)
    assert table.columns.tolist() == ["A", "B", "B - A", "B - A (%)"]
    # runs named by what tells them apart (their scenario here), each in its own run colour
    legend = next(m.value for m in app.markdown if m.value.startswith("Differences are to A."))
    assert f"color:{RUN_COLORS[0]}'>■</span> **A** fixture-2 (`slow-virtual`)" in legend
    assert f"color:{RUN_COLORS[1]}'>■</span> **B** fixture-1 (`fast-live`)" in legend
    assert table.loc["engine"].tolist()[:2] == ["virtual", "live"] and "model" in table.index
    assert table.loc["TTFT P50 (s)"].tolist() == ["1.6", "0.8", "-0.8", "-50%"]
    assert table.loc["TTFT no-queue P90 (s)"].tolist() == ["0.6", "0.6", "0", "0%"]  # TTFTs scale, service not
    charts = _charts(app)
    cdf = {t["name"]: t["line"]["color"] for t in charts["compare_cdf"]["data"]}
    assert cdf == {"fixture-2": RUN_COLORS[0], "fixture-1": RUN_COLORS[1]}
    egress = charts["compare_egress"]
    assert {t["name"]: t["line"]["color"] for t in egress["data"]} == cdf
    assert egress["layout"]["yaxis"]["title"]["text"] == "Mbit/s"  # 0..500 Mbit/s, by magnitude

    app.multiselect(key="runs_compare").set_value(["fast-live"]).run()
    assert not app.exception
    assert "compare_cdf" not in _charts(app) and "compare_egress" not in _charts(app)
    assert any("two or more" in i.value for i in app.info)


def _columns(app: AppTest, first_column: str) -> dict[str, dict]:
    """The column config the page sent for the table whose first column (or index) is `first_column`."""
    element = next(d for d in app.dataframe if first_column in (d.value.index.name, d.value.columns[0]))
    return json.loads(element.proto.columns)


def test_tables_use_human_names_rounded_numbers_and_wide_enough_headers(runs_dir: Path) -> None:
    app = _page(runs_dir)
    listing = app.dataframe[0].value
    assert listing.columns.tolist() == ["run", "status", "scenario", "engine", "link backend", "requests",
                                        "completed", "failed", "TTFT P50 (s)", "TTFT P90 (s)", "recorded at"]
    assert listing["TTFT P90 (s)"].tolist() == ["2.24", "1.12"]
    for key, frame in (("run", listing), ("metric", _compare_table(app))):
        widths = _columns(app, key)
        for column in frame.columns:  # each header whole (measured in the grid's font; a long one is
            header = widths[column].get("label") or column  # shortened, its full name on hover)
            assert widths[column]["width"] >= natural_px(header, []), (key, column)
        assert sum(widths[column]["width"] for column in frame.columns) <= PAGE_PX  # none past the edge
        cells = frame.to_numpy().ravel().tolist()
        assert "None" not in cells and "nan" not in cells and None not in cells


def test_a_killed_run_is_listed_as_incomplete_with_its_log_tail(runs_dir: Path) -> None:
    killed = runs_dir / "killed-run"
    killed.mkdir()
    (killed / "run.log").write_text("mooncake-replay: starting\nprogress: 40/1,000 requests ended, run time 12.0 s\n")
    app = _page(runs_dir)
    listing = app.dataframe[0].value.set_index("run")
    assert listing.loc["killed-run", "status"] == "incomplete"
    assert listing.loc["killed-run", "requests"] == "-"
    assert app.selectbox(key="runs_open").options == ["slow-virtual", "fast-live"]  # nothing to open
    expander = next(e for e in app.expander if "killed-run" in e.label)
    assert "incomplete: no summary.json: the run was stopped before it finished" in expander.label
    assert "progress: 40/1,000 requests ended" in expander.code[0].value


def test_only_incomplete_runs_still_show_the_listing(tmp_path: Path) -> None:
    (tmp_path / "killed").mkdir()
    (tmp_path / "killed" / "run.log").write_text("")
    app = _page(tmp_path)
    assert not app.exception and not app.error
    assert app.dataframe[0].value["status"].tolist() == ["incomplete"]
    assert "(run.log is empty)" in app.expander[0].code[0].value
    assert not app.tabs


def test_the_decision_timeline_is_a_table_and_marks_the_charts(runs_dir: Path) -> None:
    path = runs_dir / "fast-live" / "summary.json"
    doc = json.loads(path.read_text())
    doc["meta"]["decisions"] = ["t=2.0s scheduler: egress 1.00 of 12.5 Mbit/s: t 2048 -> 4096 (model: 1.67 req/s)"]
    doc["meta"]["knob_changes"] = ["t=1.0s timeline: link -> 10 Mbit/s, 10 ms, 0 % loss"]
    path.write_text(json.dumps(doc))
    app = _page(runs_dir)
    app.selectbox(key="runs_open").set_value("fast-live").run()
    assert not app.exception, [e.message for e in app.exception]
    table = next(d.value for d in app.dataframe if d.value.columns[0] == "time (s)")
    assert table.to_dict("list") == {
        "time (s)": ["1", "2"],
        "what": ["link -> 10 Mbit/s, 10 ms, 0 % loss", "threshold 2048 -> 4096 tokens"],
        "why": ["the scenario's timeline", "egress 1.00 of 12.5 Mbit/s; model: 1.67 req/s"]}
    charts = _charts(app)
    for key in ("threshold", "egress"):
        assert [shape["x0"] for shape in charts[key]["layout"]["shapes"]] == [1.0, 2.0], key
        assert [a["text"] for a in charts[key]["layout"]["annotations"]][1] == "t 2,048→4,096"
    assert charts["threshold"]["layout"]["yaxis"]["tickformat"] == ",d"  # whole tokens, never 2,047.5


def test_a_run_without_decisions_says_so(runs_dir: Path) -> None:
    app = _page(runs_dir)
    assert "No scheduler decisions or knob changes recorded in this run." in [c.value for c in app.caption]


def test_a_directory_that_does_not_exist_is_an_error(tmp_path: Path) -> None:
    app = _page(tmp_path / "missing")
    assert [e.value for e in app.error] == [
        f"runs directory '{tmp_path / 'missing'}' does not exist; type the directory holding "
        "your run folders (default runs/)"]
    assert not app.get("plotly_chart")


def test_a_directory_without_runs_says_so(tmp_path: Path) -> None:
    app = _page(tmp_path)
    assert not app.error
    assert any("No recorded runs" in i.value for i in app.info)


@pytest.mark.slow
def test_a_run_added_later_appears_on_rerun(runs_dir: Path, make_run) -> None:
    app = _page(runs_dir)
    make_run(runs_dir / "newer", scale=3.0)
    app.run()
    assert app.dataframe[0].value["run"].tolist()[0] == "newer"


def test_an_empty_directory_name_is_an_error() -> None:
    app = _page("   ")
    assert [e.value for e in app.error] == ["runs directory: empty; type a directory such as runs/"]


@pytest.mark.slow
def test_a_partial_replay_stands_out_and_a_whole_one_is_a_caption(runs_dir: Path) -> None:
    from emulator.workload.coverage import WorkloadCoverage

    partial = WorkloadCoverage("conv.jsonl (mooncake)", 10_000, 12_031, ("workload.max_requests = 10,000",),
                               is_trace=True)
    whole = WorkloadCoverage("code.csv (azure)", 8_819, 8_819, is_trace=True)
    for name, coverage in (("fast-live", partial), ("slow-virtual", whole)):
        path = runs_dir / name / "summary.json"
        doc = json.loads(path.read_text())
        doc["meta"]["workload"] = coverage.as_json()
        path.write_text(json.dumps(doc))
    app = _page(runs_dir)
    app.selectbox(key="runs_open").set_value("fast-live").run()
    workload = [w.value for w in app.warning if w.value.startswith("Workload")]
    assert workload == [
        "Workload: replaying 10,000 of 12,031 rows of conv.jsonl (mooncake): workload.max_requests = 10,000"]
    app.selectbox(key="runs_open").set_value("slow-virtual").run()
    assert not [w for w in app.warning if w.value.startswith("Workload")]
    assert "Workload: replaying all 8,819 rows of code.csv (azure)" in [c.value for c in app.caption]


@pytest.mark.slow
def test_a_run_recorded_before_the_workload_statement_says_so(runs_dir: Path) -> None:
    app = _page(runs_dir)
    app.selectbox(key="runs_open").set_value("fast-live").run()
    assert any(c.value.startswith("Workload: not recorded") for c in app.caption)


def test_a_paper_case_study_run_is_shown_beside_the_paper(runs_dir: Path) -> None:
    path = runs_dir / "slow-virtual" / "summary.json"
    doc = json.loads(path.read_text())
    doc["meta"] |= {"scenario": "paper-case-study", "threshold_start": 19_620, "n_p_start": 3}
    path.write_text(json.dumps(doc))
    app = _page(runs_dir)
    app.selectbox(key="runs_open").set_value("slow-virtual").run()
    assert not app.exception, [e.message for e in app.exception]
    assert "The paper beside this run" in [m.value.strip("*") for m in app.markdown]
    table = next(d.value for d in app.dataframe if "Paper" in d.value.columns)
    row = table.set_index(table.columns[0]).loc["Threshold t (tokens)"]
    assert (row["Paper"], row["Project"]) == ("19,400", "19,620")
