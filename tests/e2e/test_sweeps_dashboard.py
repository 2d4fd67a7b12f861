"""End to end: the Sweeps page in Debian's chromium starts the shipped threshold-load sweep (Ray
underneath), watches its points arrive and draws the heatmap, the lines and the Pareto front; and
the bandwidth-crossover sweep, whose finding it states. The screenshots go to $PRFAAS_SCREENSHOTS
too (docs/img/sweeps.png and docs/img/crossover.png in the README)."""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.e2e.browser import BROWSER_MARKS, page_at, shoot
from tests.e2e.readable import clipped, settled

pytestmark = [*BROWSER_MARKS, pytest.mark.slow]


def _run_shipped_sweep(url: str, sweep_file: str, finished: str, check: Callable) -> object:
    """Start `sweep_file` on the Sweeps page, wait for `finished` (the progress text), then call
    `check(page)` and return what it returns; the browser is closed whatever happens."""
    with page_at(f"{url}/Sweeps", "Sweeps") as page:
        page.get_by_test_id("stSelectbox").filter(has_text="Sweep file").first.click()
        page.get_by_role("option", name=sweep_file, exact=True).click()
        page.get_by_role("button", name="Start sweep").click()
        # before its first point: that it is starting, never that the folder holds no sweep
        started = re.compile(r"^Starting \S+: \d+ s since Start|^\d+ of \d+ points")
        page.get_by_text(started).first.wait_for(timeout=60_000)
        assert page.get_by_text(re.compile("no sweep.json")).count() == 0
        page.get_by_text(re.compile(finished)).wait_for(timeout=240_000)
        settled(page)
        assert clipped(page) == []  # axes, tables and tiles whole at the screenshot's size
        result = check(page)
        assert page.get_by_test_id("stException").count() == 0
        return result


def test_sweeps_page_runs_a_shipped_sweep(live_dashboard, tmp_path: Path) -> None:
    url, _server = live_dashboard

    def check(page) -> Path:
        for chart in range(3):  # heatmap, lines, Pareto front
            page.get_by_test_id("stPlotlyChart").nth(chart).locator("svg").first.wait_for(timeout=30_000)
        assert page.get_by_text("Pareto front").count() >= 1
        time.sleep(1.0)
        return shoot(page, tmp_path, "sweeps.png")

    png = _run_shipped_sweep(url, "threshold-load.yaml", r"^(\d+) of \1 points, 0 failed", check)
    parquets = list((tmp_path / "runs" / "sweeps").glob("threshold-load-*/sweep.parquet"))
    assert len(parquets) == 1 and png.stat().st_size > 0


def test_sweeps_page_states_the_bandwidth_crossover(live_dashboard, tmp_path: Path) -> None:
    url, _server = live_dashboard

    def check(page) -> Path:
        page.get_by_text(re.compile(r"PrfaaS beats homogeneous PD from .* \(hybrid\) and from .* \(dense\)")) \
            .wait_for(timeout=30_000)
        chart = page.get_by_test_id("stPlotlyChart").first  # the findings come before the other figures
        chart.locator("svg").first.wait_for(timeout=30_000)
        time.sleep(1.0)
        return shoot(chart, tmp_path, "crossover.png")

    png = _run_shipped_sweep(url, "bandwidth-crossover.yaml", r"^80 of 80 points, 0 failed", check)
    assert png.stat().st_size > 0
