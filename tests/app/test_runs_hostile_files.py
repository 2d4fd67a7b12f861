"""The Runs page against run folders a local user planted: links to files outside (a secret file,
/proc/self/environ), a nested summary.json. The good runs still list and open; each bad one is named
with its reason; no linked file's content reaches the page."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from app.runs_view import list_runs, listing_table

PAGE = Path(__file__).resolve().parents[2] / "app" / "pages" / "2_Runs.py"
SECRET = "TOPSECRET-b7e1d4"  # the content of the file the links point at
DEPTH = 100_000


@pytest.fixture
def hostile_runs(tmp_path: Path, make_run) -> Path:
    """runs/: `good`; `log-link` (run.log -> secret, no summary); `report-link` (a recorded run whose
    report.html -> secret); `nested` (summary.json nested 100,000 deep); `linked-folder` (-> a run
    folder outside)."""
    secret = tmp_path / "secret.txt"
    secret.write_text(f"{SECRET}\nsecond line\n")
    root = tmp_path / "runs"
    make_run(root / "good")
    (root / "log-link").mkdir()
    (root / "log-link" / "run.log").symlink_to(secret)
    make_run(root / "report-link")
    (root / "report-link" / "report.html").unlink()
    (root / "report-link" / "report.html").symlink_to(secret)
    make_run(root / "nested")
    (root / "nested" / "summary.json").write_text("[" * DEPTH + "]" * DEPTH)
    make_run(tmp_path / "elsewhere")
    (root / "linked-folder").symlink_to(tmp_path / "elsewhere")
    return root


def test_one_bad_run_among_good_ones_is_named_and_the_others_list(hostile_runs: Path) -> None:
    listing = list_runs(hostile_runs)
    assert sorted(run.name for run in listing.runs) == ["good", "report-link"]
    problems = dict(listing.problems)
    assert set(problems) == {"log-link", "nested", "linked-folder"}
    assert "run.log" in problems["log-link"] and "symbolic link" in problems["log-link"]
    assert "summary.json" in problems["nested"] and "deeper than" in problems["nested"]
    assert "symbolic link" in problems["linked-folder"]
    assert not listing.incomplete  # log-link's log cannot be read, so it is not shown as a log
    assert SECRET not in repr(listing)
    table = listing_table(listing)
    assert set(table["run"]) == {"good", "report-link"}


def test_a_log_linked_to_proc_environ_is_not_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PRFAAS_TEST_ENV_SECRET", SECRET)
    (tmp_path / "environ").mkdir()
    (tmp_path / "environ" / "run.log").symlink_to(Path("/proc/self/environ"))
    listing = list_runs(tmp_path)
    assert dict(listing.problems).keys() == {"environ"}
    assert SECRET not in repr(listing)


def test_a_fifo_run_log_does_not_block_the_listing(tmp_path: Path, make_run) -> None:
    make_run(tmp_path / "good")
    (tmp_path / "fifo").mkdir()
    os.mkfifo(tmp_path / "fifo" / "run.log")
    listing = list_runs(tmp_path)
    assert [run.name for run in listing.runs] == ["good"]
    assert "not a regular file" in dict(listing.problems)["fifo"]


def _page(runs_dir: Path) -> AppTest:
    app = AppTest.from_file(str(PAGE), default_timeout=30).run()
    app.text_input(key="runs_dir").set_value(str(runs_dir)).run()
    assert not app.exception, [e.message for e in app.exception]
    return app


def _all_text(app: AppTest) -> str:
    """Every element's protobuf as text: what the browser would be sent, short of media files."""
    return "\n".join(str(node.proto) for node in _walk(app._tree) if getattr(node, "proto", None) is not None)


def _walk(node):
    yield node
    for child in getattr(node, "children", {}).values():
        yield from _walk(child)


def test_the_page_lists_the_good_runs_names_the_bad_and_shows_no_secret(hostile_runs: Path) -> None:
    app = _page(hostile_runs)
    assert sorted(app.dataframe[0].value["run"]) == ["good", "report-link"]
    warnings = " ".join(w.value for w in app.warning)
    assert "`nested`" in warnings and "deeper than" in warnings
    assert "`log-link`" in warnings and "`linked-folder`" in warnings
    assert SECRET not in _all_text(app)


@pytest.mark.slow
def test_a_report_linked_elsewhere_is_not_offered_for_download(hostile_runs: Path) -> None:
    app = _page(hostile_runs)
    app.selectbox(key="runs_open").set_value("report-link").run()
    assert not app.exception, [e.message for e in app.exception]
    buttons = {b.key for b in app.get("download_button")}
    assert "runs_dl_report" not in buttons
    assert {"runs_dl_parquet", "runs_dl_requests_csv"} <= buttons  # the run's own files still are
    assert any("report.html" in c.value and "symbolic link" in c.value for c in app.caption)
    assert SECRET not in _all_text(app)
