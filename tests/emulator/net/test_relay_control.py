"""The relays' control channel against a real relay process (the proxy relay: no root needed).

Bad lines, oversized lines, unknown ops and invalid specs each get a one-line error reply, and the
relay keeps serving on the same connection afterwards.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from emulator.errors import LinkSpecError, TopologyError
from emulator.net.backend import LinkEnds
from emulator.net.proxy_backend import ProxyBackend
from emulator.net.relay_control import MAX_LINE_BYTES, ControlServer, LineReader
from emulator.net.relay_process import REPO_ROOT, RelayProcess
from emulator.net.spec import LinkSpec

pytestmark = pytest.mark.live  # every test here starts a process

ENDS = LinkEnds("c0ffee", None, None, "prf-c0ffee-rem", "prf-c0ffee-loc")


@pytest.fixture
def relay(tmp_path: Path) -> Iterator[ProxyBackend]:
    backend = ProxyBackend(ENDS, run_dir=tmp_path)
    backend.apply(LinkSpec(delay_ms=1))
    yield backend
    backend.close()


@pytest.fixture
def control(relay: ProxyBackend) -> Iterator[socket.socket]:
    assert relay._relay is not None
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(5)
    sock.connect(relay._relay.control_path)
    yield sock
    sock.close()


def ask(sock: socket.socket, line: bytes) -> dict:
    sock.sendall(line)
    reply = LineReader(sock).next_line()
    assert reply is not None, "relay closed the control connection"
    return json.loads(reply)


def test_status_reports_the_backend_and_spec(control: socket.socket) -> None:
    reply = ask(control, b'{"op": "status"}\n')
    assert reply["ok"] is True
    assert reply["status"]["backend"] == "proxy" and reply["status"]["spec"]["delay_ms"] == 1


def test_bad_json_gets_an_error_and_the_relay_keeps_serving(control: socket.socket) -> None:
    reply = ask(control, b"this is not json\n")
    assert reply["ok"] is False and "not JSON" in reply["error"] and "\n" not in reply["error"]
    assert ask(control, b"[1, 2]\n")["error"].startswith("bad request: expected a JSON object")
    assert ask(control, b'{"op": "status"}\n')["ok"] is True


def test_oversized_line_is_rejected_without_killing_the_relay(control: socket.socket,
                                                              relay: ProxyBackend) -> None:
    huge = b'{"op": "status", "pad": "' + b"x" * (4 * MAX_LINE_BYTES) + b'"}\n'
    control.sendall(huge)
    reader = LineReader(control)
    first = json.loads(reader.next_line() or b"{}")
    assert first["ok"] is False and f"longer than {MAX_LINE_BYTES}" in first["error"]
    control.sendall(b'{"op": "counters"}\n')
    assert json.loads(reader.next_line() or b"{}")["ok"] is True
    assert relay.status()["backend"] == "proxy"


def test_unknown_op_lists_the_known_ones(control: socket.socket) -> None:
    reply = ask(control, b'{"op": "explode"}\n')
    assert reply["ok"] is False and "unknown op 'explode'" in reply["error"]
    assert "update" in reply["error"] and "route" in reply["error"]


def test_invalid_spec_names_the_field(control: socket.socket, relay: ProxyBackend) -> None:
    reply = ask(control, b'{"op": "update", "spec": {"delay_ms": -5}}\n')
    assert reply["ok"] is False and reply["kind"] == "spec"
    assert "spec.delay_ms" in reply["error"] and "-5" in reply["error"]
    missing = ask(control, b'{"op": "update"}\n')
    assert missing["ok"] is False and '"spec"' in missing["error"]
    assert relay.status()["spec"]["delay_ms"] == 1  # the bad update changed nothing


def test_client_raises_link_spec_error_for_a_rejected_spec(relay: ProxyBackend) -> None:
    assert relay._relay is not None
    with pytest.raises(LinkSpecError, match="spec.bandwidth_mbit"):
        relay._relay.request("update", spec={"bandwidth_mbit": 0})
    with pytest.raises(TopologyError, match="dst_port"):
        relay._relay.request("route", dst_port="http")


def test_bad_start_reports_one_line_and_leaves_nothing(tmp_path: Path) -> None:
    with pytest.raises(TopologyError, match=r"exited with 2 .*spec\.delay_ms") as err:
        RelayProcess("emulator.net.proxy_relay", "bad", ["--spec", '{"delay_ms": -1}'], tmp_path)
    assert "\n" not in str(err.value)
    assert not (tmp_path / "bad.sock").exists()


def test_a_live_control_socket_is_not_stolen(tmp_path: Path, relay: ProxyBackend) -> None:
    assert relay._relay is not None
    server = ControlServer(relay._relay.control_path, lambda request: {})
    with pytest.raises(TopologyError, match="another relay is serving it"):
        server.start()


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_relay_exits_cleanly_on_a_signal(relay: ProxyBackend, sig: signal.Signals) -> None:
    assert relay._relay is not None
    os.kill(relay._relay.pid, sig)
    assert relay._relay.wait_exit(5) == 0
    assert not Path(relay._relay.control_path).exists()


def test_relay_exits_when_its_parent_is_killed(tmp_path: Path) -> None:
    script = (
        "import sys\n"
        "from emulator.net.backend import LinkEnds\n"
        "from emulator.net.proxy_backend import ProxyBackend\n"
        "from emulator.net.spec import LinkSpec\n"
        "from pathlib import Path\n"
        "ends = LinkEnds('c0ffee', None, None, 'a', 'b')\n"
        f"b = ProxyBackend(ends, run_dir=Path({str(tmp_path)!r}))\n"
        "b.apply(LinkSpec())\n"
        "print(b.pid, flush=True)\n"
        "sys.stdin.read()\n"
    )
    parent = subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, cwd=REPO_ROOT)
    try:
        assert parent.stdout is not None
        relay_pid = int(parent.stdout.readline())
        assert Path(f"/proc/{relay_pid}").exists()
        parent.send_signal(signal.SIGKILL)
        parent.wait(5)
        deadline = time.monotonic() + 5
        while _is_running(relay_pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _is_running(relay_pid), "relay outlived its parent"
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()


def _is_running(pid: int) -> bool:
    """True while `pid` exists and is not a zombie (an orphaned relay is reaped by init)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False
    return state != "Z"
