"""The Runs page headless (AppTest): lists fixture runs, opens one, compares two, refuses bad dirs."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
from streamlit.testing.v1 import AppTest

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


def test_renders_with_the_default_directory() -> None:
    app = _page()
    assert app.title[0].value == "Runs"
    assert app.text_input(key="runs_dir").value == "runs"
    assert not app.error  # a missing default runs/ is a hint, not an error


def test_lists_fixture_runs_and_flags_the_foreign_one(runs_dir: Path) -> None:
    app = _page(runs_dir)
    assert app.dataframe[0].value["run"].tolist() == ["slow-virtual", "fast-live"]
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
    assert "link backend: proxy (no root)" in [c.value for c in app.caption]
    assert any("ttft_p90_s = 1.12 > max 1.0" in w.value for w in app.warning)

    charts = _charts(app)
    assert {"ttft_cdf", "egress", "gantt", "threshold"} <= set(charts)
    assert sorted(t["name"] for t in charts["ttft_cdf"]["data"]) == ["local", "prfaas"]
    gantt_names = [t["name"] for t in charts["gantt"]["data"]]
    assert gantt_names == ["queue", "prefill", "transfer", "decode", "first token"]
    assert sorted(t["name"] for t in charts["egress"]["data"]) == ["egress", "link capacity"]
    assert charts["egress"]["layout"]["yaxis"]["title"]["text"] == "Gbit/s"  # recorded in bit/s

    buttons = {b.key for b in app.get("download_button")}
    assert buttons == {"runs_dl_parquet", "runs_dl_requests_csv", "runs_dl_timeseries_csv", "runs_dl_report"}


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


def test_compares_two_runs(runs_dir: Path) -> None:
    app = _page(runs_dir)
    assert app.multiselect(key="runs_compare").value == ["slow-virtual", "fast-live"]
    table = app.dataframe[1].value
    assert table.columns.tolist() == ["slow-virtual", "fast-live"]
    assert table.loc["TTFT P50 (s)"].tolist() == ["1.6", "0.8"]
    overlaid = _charts(app)["compare_cdf"]["data"]
    assert sorted(t["name"] for t in overlaid) == ["fast-live", "slow-virtual"]

    app.multiselect(key="runs_compare").set_value(["fast-live"]).run()
    assert not app.exception
    assert "compare_cdf" not in _charts(app)
    assert any("two or more" in i.value for i in app.info)


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


def test_a_run_added_later_appears_on_rerun(runs_dir: Path, make_run) -> None:
    app = _page(runs_dir)
    make_run(runs_dir / "newer", scale=3.0)
    app.run()
    assert app.dataframe[0].value["run"].tolist()[0] == "newer"


def test_an_empty_directory_name_is_an_error() -> None:
    app = _page("   ")
    assert [e.value for e in app.error] == ["runs directory: empty; type a directory such as runs/"]
