"""A sweep's Ray leaves the process as it found it. Ray's driver installs a SIGTERM handler that
raises SystemExit; left behind, every helper this process forks later (pyroute2 forks one per
namespace it enters, and ends it with SIGTERM) would unwind its copy of the parent's stack and run
on as a second copy of the program instead of dying."""

from __future__ import annotations

import os
import signal
import time

import pytest

from emulator.sweep.runner import ray_session, signal_handlers_kept

pytestmark = pytest.mark.live  # every test here starts a process


def _fork_and_terminate() -> int:
    """Fork a child that sleeps, SIGTERM it, and return its wait status."""
    pid = os.fork()
    if pid == 0:  # the child never returns into the test, whatever the signal does
        try:
            time.sleep(30)
        finally:
            os._exit(3)
    time.sleep(0.2)
    os.kill(pid, signal.SIGTERM)
    return os.waitpid(pid, 0)[1]


def test_a_local_ray_session_restores_the_signal_handlers_it_found() -> None:
    previous = signal.signal(signal.SIGTERM, signal.SIG_DFL)
    try:
        with ray_session(None, 1) as ray_info:
            assert ray_info["mode"] == "local"
        assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
        # later code that saves and restores handlers (the live session does) re-installs whatever
        # Python believes is current; a forked child must still die of SIGTERM
        signal.signal(signal.SIGTERM, signal.getsignal(signal.SIGTERM))
        status = _fork_and_terminate()
        assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGTERM, \
            f"a forked child ran on after SIGTERM (wait status {status})"
    finally:
        signal.signal(signal.SIGTERM, previous)


def test_a_cluster_kept_in_signal_handlers_kept_leaves_none_behind() -> None:
    """Ray's node (ray.cluster_utils.Cluster, as the two-node test and bench start it) installs a
    SIGTERM handler of its own and keeps it after shutdown; signal_handlers_kept puts ours back."""
    from ray.cluster_utils import Cluster

    previous = signal.signal(signal.SIGTERM, signal.SIG_DFL)
    try:
        with signal_handlers_kept():
            cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
            try:
                assert signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL  # the node's own handler
            finally:
                cluster.shutdown()
        assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
    finally:
        signal.signal(signal.SIGTERM, previous)
