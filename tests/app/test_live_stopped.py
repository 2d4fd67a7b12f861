"""The Live page's Stop on a run it started (virtual: no root, the same Stop as a live run's, SIGINT to
`python -m emulator run`): the tiles say `stopped` and hold the record's counts, the same numbers as
the results below them, which say when it stopped and that its `expect:` was not judged, in words."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from app.live_view import TILES
from emulator.telemetry.labels import format_number

PAGE = Path(__file__).resolve().parents[2] / "app" / "pages" / "1_Live.py"
pytestmark = pytest.mark.slow


def _until(app: AppTest, done: Callable[[AppTest], bool], timeout_s: float) -> AppTest:
    deadline = time.monotonic() + timeout_s
    while True:
        app.run()
        assert not app.exception, [e.message for e in app.exception]
        if done(app):
            return app
        assert time.monotonic() < deadline, [(m.label, m.value) for m in app.metric]
        time.sleep(0.3)


def _tiles(app: AppTest) -> list[tuple[str, str]]:
    return [(m.label, m.value) for m in app.metric]


def test_stop_shows_stopped_with_tiles_equal_to_the_record(live_env: str, tmp_path: Path) -> None:
    app = AppTest.from_file(str(PAGE), default_timeout=30).run()
    app.radio(key="live_engine").set_value("virtual")
    app.number_input(key="live_duration").set_value(100_000.0)  # minutes of simulation: Stop comes first
    app.button(key="live_start").click().run()
    _until(app, lambda a: dict(_tiles(a)).get(TILES["ended"], "-") != "-", timeout_s=90)  # simulating
    app.button(key="live_stop").click().run()
    # the process has ended and the page has drawn its results (one rerun may still see it simulating)
    _until(app, lambda a: TILES["completed"] in dict(_tiles(a)) and _tiles(a)[0][1] != "simulating", timeout_s=90)
    (run,) = (tmp_path / "runs").iterdir()
    doc = json.loads((run / "summary.json").read_text())
    summary, meta = doc["summary"], doc["meta"]
    assert (meta["outcome"], meta["stopped_by"], doc["expect_failures"]) == ("stopped", "SIGINT", [])
    tiles = _tiles(app)
    assert tiles[:4] == [
        (TILES["state"], "stopped"), (TILES["simulated_time"], f"{summary['duration_s']:.1f}"),
        (TILES["arrived"], f"{format_number(summary['completed'])} / {format_number(summary['requests'])}"),
        (TILES["failed"], format_number(summary["failed_count"]))]
    results = dict(tiles[4:])  # the results below: the same record
    assert results[TILES["completed"]] == format_number(summary["completed"])
    assert results[TILES["failed_count"]] == tiles[3][1]
    assert [w.value for w in app.warning] == [f"**Stopped**: {meta['end_reason']}"]
    assert any(i.value.startswith("**Expect**: not judged: the run was stopped") for i in app.info)
    assert "by SIGINT (Ctrl-C, or the Live page's Stop)" in meta["end_reason"]
