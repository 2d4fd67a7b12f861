"""What every browser test shares: Debian's chromium, its headless flags, and the marks that skip
a test (with the reason) where chromium is not installed."""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

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
