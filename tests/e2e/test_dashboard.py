"""End to end: the dashboard served as `make run` serves it, loaded in Debian's chromium.

Skips, with the reason, when /usr/bin/chromium is missing (`apt-get install chromium`).
"""

from __future__ import annotations

from pathlib import Path

from model_stub.config import PRESET_NAMES
from tests.e2e.browser import BROWSER_MARKS, CHROMIUM, CHROMIUM_ARGS

pytestmark = BROWSER_MARKS


def test_home_page_renders_presets(dashboard_url: str, tmp_path: Path) -> None:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1400})
            page.goto(dashboard_url)
            page.get_by_role("heading", name="PrfaaS Lab").wait_for(timeout=30_000)
            # The grid's cells exist only once the table has rendered, not while it is a skeleton.
            table = page.get_by_test_id("stDataFrame")
            table.get_by_test_id("glide-cell-0-0").wait_for(state="attached", timeout=30_000)
            page.get_by_test_id("stPlotlyChart").locator("svg").first.wait_for(timeout=30_000)
            page.screenshot(path=str(tmp_path / "home.png"), full_page=True)

            assert page.get_by_test_id("stException").count() == 0
            table_text = table.text_content() or ""
            page_text = page.locator("body").text_content() or ""
        finally:
            browser.close()
    for name in PRESET_NAMES:
        assert name in table_text, f"{name} missing from the table"
        assert name in page_text, f"{name} missing from the page"
