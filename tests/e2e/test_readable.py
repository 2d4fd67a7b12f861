"""End to end: every page reads whole in Debian's chromium, on a 1280 x 800 laptop window and at the
README's screenshot size. Home, KV explorer, Threshold explorer, Runs (a run with scheduler
decisions open, then Classroom step 2's dense and hybrid runs compared), Classroom and Sweeps:
no table wider than its place, no short table that scrolls, no tile cut (tests/e2e/readable.py).

The runs are recorded first with `python -m emulator run --engine virtual` (seconds each). The
screenshots go to $PRFAAS_SCREENSHOTS too (home.png, kv-explorer.png, runs.png and
runs-dense-vs-hybrid.png in docs/img; the Classroom's is the tour test's).
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.e2e.browser import BROWSER_MARKS, CHROMIUM, CHROMIUM_ARGS, VIEWPORT, first_scheduler_move, shoot
from tests.e2e.readable import READABLE_VIEWPORT, clipped, settled

ROOT = Path(__file__).resolve().parents[2]
pytestmark = [*BROWSER_MARKS, pytest.mark.slow]
# Recorded oldest first, so the Compare tab opens on the newest two: dense (A) and hybrid (B).
RUNS = (("live-bandwidth-drop-virtual", "live-bandwidth-drop.yaml", ()),
        ("live-dense-vs-hybrid-hybrid", "live-dense-vs-hybrid.yaml", ("model.preset=kimi-linear-mini",)),
        ("live-dense-vs-hybrid-dense", "live-dense-vs-hybrid.yaml", ()))


# (path, heading, screenshot or None where another browser test takes the page's picture)
PAGES = (("", "PrfaaS Lab", "home.png"), ("KV_explorer", "KV explorer", "kv-explorer.png"),
         ("Threshold_explorer", "Threshold explorer", None), ("Classroom", "Classroom", None),
         ("Sweeps", "Sweeps", None))


def _record(runs_dir: Path) -> None:
    for name, scenario, overrides in RUNS:
        sets = [arg for item in overrides for arg in ("--set", item)]
        done = subprocess.run([sys.executable, "-m", "emulator", "run", f"scenarios/{scenario}", "--engine", "virtual",
                               "--out", str(runs_dir / name), *sets], cwd=ROOT, capture_output=True, text=True,
                              timeout=300)
        assert done.returncode == 0, done.stderr


def _whole(page, where: str) -> None:
    """The page reads whole at the laptop's width and at the screenshot's."""
    for viewport in (READABLE_VIEWPORT, VIEWPORT):
        page.set_viewport_size(viewport)
        settled(page)
        assert clipped(page) == [], f"{where} at {viewport['width']} px"
    assert page.get_by_test_id("stException").count() == 0, where


def _open(page, url: str, heading: str) -> None:
    page.set_viewport_size(READABLE_VIEWPORT)
    page.goto(url)
    page.get_by_role("heading", name=heading).first.wait_for(timeout=60_000)
    settled(page)


def _choose(page, label: str, option: str) -> None:
    page.get_by_test_id("stSelectbox").filter(has_text=label).first.click()
    page.get_by_role("option", name=option, exact=True).click()
    settled(page)


def test_every_page_reads_whole(live_dashboard, tmp_path: Path) -> None:
    from playwright.sync_api import sync_playwright

    url, _server = live_dashboard
    _record(tmp_path / "runs")
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport=READABLE_VIEWPORT)
            for path, heading, png in PAGES:
                _open(page, f"{url}/{path}", heading)
                _whole(page, heading)
                if png:
                    shoot(page, tmp_path, png)

            _open(page, f"{url}/Runs", "Runs")
            runs_dir = page.get_by_label("Runs directory", exact=True)
            runs_dir.fill(str(tmp_path / "runs"))
            runs_dir.press("Enter")
            settled(page)
            _choose(page, "Run", "live-bandwidth-drop-virtual")
            page.get_by_text("Decisions and knob changes").wait_for(timeout=30_000)
            page.get_by_text("Each decision in full").click()  # the detail view: every reason whole
            move = first_scheduler_move(tmp_path / "runs" / "live-bandwidth-drop-virtual" / "summary.json")
            whole = re.escape(f"{move.what}: {move.why}").replace(re.escape("->"), "(->|→)")  # markdown draws arrows
            page.get_by_text(re.compile(whole)).first.wait_for(timeout=30_000)
            _whole(page, "Runs, a run open")
            page.get_by_role("heading", name="Runs").first.scroll_into_view_if_needed()  # its tiles in the picture
            page.wait_for_timeout(500)
            shoot(page, tmp_path, "runs.png")

            page.set_viewport_size(READABLE_VIEWPORT)
            page.get_by_role("tab", name="Compare runs").click()
            legend = page.get_by_text(re.compile(r"^Differences are to A\."))
            legend.wait_for(timeout=30_000)
            assert re.search(r"A dense-gqa-mini \(small\).*B kimi-linear-mini \(small\)", legend.inner_text()), \
                legend.inner_text()  # Classroom step 2's runs, told apart by their model
            _whole(page, "Runs, dense vs hybrid compared")
            shoot(page, tmp_path, "runs-dense-vs-hybrid.png")
        finally:
            browser.close()
