"""What every browser test shares: Debian's chromium, its headless flags, the marks that skip a test
(with the reason) where chromium is not installed, and a recorded run's first scheduler decision."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from emulator.telemetry.decision_log import LogEntry, parse_line

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]
BROWSER_MARKS = [
    pytest.mark.browser,
    pytest.mark.skipif(
        not CHROMIUM.exists(),
        reason=f"{CHROMIUM} is missing; install Debian's chromium (apt-get install chromium)",
    ),
]

ROOT = Path(__file__).resolve().parents[2]
SCREENSHOTS_ENV = "PRFAAS_SCREENSHOTS"  # e.g. docs/img: where the README's screenshots are refreshed
VIEWPORT = {"width": 1400, "height": 2200}  # a whole page


@contextlib.contextmanager
def page_at(url: str, heading: str, viewport: dict[str, int] = VIEWPORT) -> Iterator:
    """Chromium on `url` once its `heading` shows; the browser is closed whatever happens."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport=viewport)
            page.goto(url)
            page.get_by_role("heading", name=heading).wait_for(timeout=30_000)
            yield page
        finally:
            browser.close()


def shoot(page, tmp_path: Path, name: str) -> Path:
    """A screenshot in the test's tmp dir, copied to $PRFAAS_SCREENSHOTS when that is set."""
    path = tmp_path / name
    page.screenshot(path=str(path))
    if target := os.environ.get(SCREENSHOTS_ENV):
        out = ROOT / target if not Path(target).is_absolute() else Path(target)
        out.mkdir(parents=True, exist_ok=True)
        shutil.copy(path, out / name)
    return path


def first_scheduler_move(summary: Path) -> LogEntry:
    """The first scheduler decision a recorded run made (summary.json's meta.decisions), so a page test
    checks what the engine decided rather than a number copied from an earlier run of it."""
    lines = json.loads(summary.read_text())["meta"]["decisions"]
    moves = [entry for entry in map(parse_line, lines) if entry.source == "scheduler"]
    assert moves, f"{summary}: the run made no scheduler decision"
    return moves[0]
