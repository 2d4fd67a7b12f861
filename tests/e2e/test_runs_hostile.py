"""End to end: the Runs page in Debian's chromium against run folders another local user planted: a
run.log and a report.html linked to a secret file, and a summary.json nested 100,000 deep. The secret
never reaches the browser, the linked report is not offered for download, the nested run is named as
unreadable with its reason, and the good runs still list and open."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.app.conftest import write_run
from tests.e2e.browser import BROWSER_MARKS, CHROMIUM, CHROMIUM_ARGS, VIEWPORT, shoot

pytestmark = BROWSER_MARKS
SECRET = "TOPSECRET-e2e-41d7"


@pytest.fixture
def hostile_runs(tmp_path: Path) -> Path:
    secret = tmp_path / "secret.txt"
    secret.write_text(f"{SECRET}\n")
    root = tmp_path / "runs"
    write_run(root / "good")
    (root / "log-link").mkdir()
    (root / "log-link" / "run.log").symlink_to(secret)
    write_run(root / "report-link")
    (root / "report-link" / "report.html").unlink()
    (root / "report-link" / "report.html").symlink_to(secret)
    write_run(root / "nested")
    (root / "nested" / "summary.json").write_text("[" * 100_000 + "]" * 100_000)
    return root


def test_runs_page_shows_no_linked_file_and_names_each_bad_run(dashboard_url: str, hostile_runs: Path,
                                                               tmp_path: Path) -> None:
    from playwright.sync_api import expect, sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport=VIEWPORT)
            page.goto(f"{dashboard_url}/Runs")
            page.get_by_role("heading", name="Runs", exact=True).wait_for(timeout=30_000)
            box = page.get_by_label("Runs directory", exact=True).and_(page.get_by_test_id("stTextInputField"))
            box.fill(str(hostile_runs))
            box.press("Enter")
            warning = page.get_by_text("Skipped, not readable as runs")
            warning.wait_for(timeout=30_000)
            listing = page.get_by_test_id("stDataFrame").first
            expect(listing).to_contain_text("report-link", timeout=30_000)  # the grid has drawn its rows
            listed = listing.text_content() or ""
            skipped = page.get_by_test_id("stAlert").all_text_contents()
            first_html = page.content()

            page.get_by_test_id("stSelectbox").filter(has_text="Run").first.click()
            page.get_by_role("option", name="report-link", exact=True).click()
            page.get_by_text("Not offered for download").wait_for(timeout=30_000)
            page.get_by_test_id("stDownloadButton").first.wait_for(timeout=30_000)
            downloads = page.get_by_test_id("stDownloadButton").all_text_contents()
            shoot(page, tmp_path, "runs-hostile.png")
            assert page.get_by_test_id("stException").count() == 0
            opened_html = page.content()
        finally:
            browser.close()
    assert "good" in listed and "report-link" in listed
    skipped_text = " ".join(skipped)
    assert "nested" in skipped_text and "deeper than 64 levels" in skipped_text
    assert "log-link" in skipped_text and "symbolic link" in skipped_text
    assert SECRET not in first_html and SECRET not in opened_html
    assert any("requests CSV" in text for text in downloads)
    assert not any("report.html" in text for text in downloads)
