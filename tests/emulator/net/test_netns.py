"""Namespace helpers stay helpers: pyroute2 forks one per namespace it enters and ends it with
SIGTERM. Whatever Python handlers the process holds (Ray's driver and node leave one that raises
SystemExit), a forked child must die of that SIGTERM, not unwind a copy of the caller's stack and
run on as a second copy of the program (CI once saw a second pytest remove live namespaces)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import emulator.net  # noqa: F401  (registers the fork hook under test)
from emulator.net.names import netns_name

ROOT = Path(__file__).resolve().parents[3]
HELPERS = 300  # about 0.5 % of helpers ran on before the fix: 300 catch it almost surely
SCRIPT = """
import os, signal, sys
from emulator.net import netns
signal.signal(signal.SIGTERM, lambda *_: sys.exit(15))  # as Ray's driver and node leave it
pid, name = os.getpid(), sys.argv[1]
try:
    netns.create_netns(name)
    from pyroute2 import NetNS
    for _ in range(int(sys.argv[2])):
        with NetNS(name) as ns:
            ns.link_lookup(ifname="lo")
finally:
    if os.getpid() != pid:
        print("a helper ran on", flush=True)
        os._exit(3)
netns.remove_netns(name)
print("done", flush=True)
"""


def _fork_then_signal(sig: int) -> int:
    """Fork a child that sleeps, send it `sig`, return its wait status (it never returns here)."""
    pid = os.fork()
    if pid == 0:
        try:
            time.sleep(1.0)
        finally:
            os._exit(3)
    time.sleep(0.2)
    os.kill(pid, sig)
    return os.waitpid(pid, 0)[1]


@pytest.mark.live
def test_a_forked_child_dies_of_sigterm_whatever_handler_the_parent_holds() -> None:
    previous = signal.signal(signal.SIGTERM, lambda *_: sys.exit(15))
    try:
        status = _fork_then_signal(signal.SIGTERM)
        assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGTERM, status
        status = _fork_then_signal(signal.SIGINT)  # Ctrl-C is the parent's: the helper finishes
        assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 3, status
    finally:
        signal.signal(signal.SIGTERM, previous)


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root: namespaces need CAP_NET_ADMIN")
def test_no_pyroute2_helper_runs_on_under_a_system_exit_handler(run_id: str) -> None:
    done = subprocess.run([sys.executable, "-c", SCRIPT, netns_name(run_id, "remote"), str(HELPERS)], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["done"], done.stdout
