"""End to end: the dashboard served as `make run` serves it, loaded in Debian's chromium.

Skips, with the reason, when /usr/bin/chromium is missing (`apt-get install chromium`).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from model_stub.config import PRESET_NAMES

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = Path("/usr/bin/chromium")
pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(
        not CHROMIUM.exists(),
        reason=f"{CHROMIUM} is missing; install Debian's chromium (apt-get install chromium)",
    ),
]
CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]
STARTUP_TIMEOUT_S = 60.0


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _wait_healthy(server: subprocess.Popen[bytes], url: str, log: Path) -> None:
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    while time.monotonic() < deadline:
        if server.poll() is not None:
            pytest.fail(f"streamlit exited with {server.returncode}:\n{log.read_text()}")
        try:
            with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as resp:
                if resp.status == 200:
                    return
        except OSError:
            time.sleep(0.3)
    pytest.fail(f"streamlit not healthy after {STARTUP_TIMEOUT_S:.0f} s:\n{log.read_text()}")


@pytest.fixture
def dashboard_url(tmp_path: Path) -> Iterator[str]:
    """Serve app/Home.py with the Makefile's flags on a free port; always stop the server."""
    port = _free_port()
    log = tmp_path / "streamlit.log"
    cmd = [
        sys.executable, "-m", "streamlit", "run", "app/Home.py",
        "--server.address", "127.0.0.1", "--server.port", str(port),
        "--browser.gatherUsageStats", "false", "--server.headless", "true",
    ]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    with log.open("wb") as out:
        server = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        url = f"http://127.0.0.1:{port}"
        _wait_healthy(server, url, log)
        yield url
    finally:
        server.terminate()
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


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
