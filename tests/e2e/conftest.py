"""Fixtures for the browser tests: the dashboard served as `make run` serves it, on a free port.

The server runs `streamlit run app/Home.py` with the Makefile's flags (the project is installed editable); it is always
stopped (SIGTERM, then SIGKILL) and its log is printed when it fails to come up.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
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


@contextlib.contextmanager
def serve_dashboard(log: Path, env: dict[str, str]) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """(url, server process) of app/Home.py served with the Makefile's flags."""
    port = _free_port()
    cmd = [
        sys.executable, "-m", "streamlit", "run", "app/Home.py",
        "--server.address", "127.0.0.1", "--server.port", str(port),
        "--browser.gatherUsageStats", "false", "--server.headless", "true",
    ]
    with log.open("wb") as out:
        server = subprocess.Popen(cmd, cwd=ROOT, env={**env}, stdout=out,
                                  stderr=subprocess.STDOUT)
    try:
        url = f"http://127.0.0.1:{port}"
        _wait_healthy(server, url, log)
        yield url, server
    finally:
        server.terminate()  # Streamlit exits cleanly: the Live page's runs and broker stop with it
        try:
            server.wait(timeout=45)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


@pytest.fixture
def dashboard_url(tmp_path: Path) -> Iterator[str]:
    with serve_dashboard(tmp_path / "streamlit.log", dict(os.environ)) as (url, _):
        yield url


@pytest.fixture
def live_dashboard(tmp_path: Path) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """The dashboard with its defaults (embedded broker), recording started runs under tmp_path."""
    env = {k: v for k, v in os.environ.items() if k != "PRFAAS_BROKER_URL"}
    env["PRFAAS_RUNS_DIR"] = str(tmp_path / "runs")
    with serve_dashboard(tmp_path / "streamlit.log", env) as served:
        yield served
