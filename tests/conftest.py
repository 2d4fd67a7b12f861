"""Session-wide test hygiene, and the marks the fast tier (`make test-fast`) selects by.

A test is `live` when it starts a process (a worker, a relay, an MQTT broker, streamlit, Ray, a
CLI child): marked here when it uses a fixture that starts one, in its file otherwise. A test
skipped for `needs root...` is marked `root` here. Under `--forbid-processes` (the fast tier) a
selected test that starts a process fails, naming the process, so a missing mark shows at once.
"""

from __future__ import annotations

import _posixsubprocess
import os
import subprocess
import sys

import pytest

# Fixtures (by name, anywhere in a test's fixture closure) that start a process.
LIVE_FIXTURES = frozenset({
    "spawn", "topology",                          # worker processes, a tun topology (emulator/worker)
    "embedded_broker", "mosquitto", "broker_url", "mqtt_broker",  # MQTT brokers (emulator, app)
    "dashboard_url", "live_dashboard",            # a streamlit server (e2e)
    "local_ray",                                  # a local Ray (emulator/sweep)
})


@pytest.fixture(autouse=True)
def _restore_main_module():
    """Streamlit's AppTest installs the page script as `sys.modules["__main__"]` and leaves it there;
    a later test that spawns a process would then re-run that page in the child (multiprocessing's
    spawn imports the parent's main file). Put the real one back after every test."""
    main = sys.modules.get("__main__")
    yield
    if main is not None:
        sys.modules["__main__"] = main


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--forbid-processes", action="store_true",
                     help="fail a test that starts a process (the fast tier's check on its selection)")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        _mark_tier(item)
    _skip_gpu_without_cuda(items)


def _mark_tier(item: pytest.Item) -> None:
    """`live` from the fixtures the test uses, `root` from a `needs root...` skip (the suite's
    convention for tests that create namespaces, TUN devices or mounts)."""
    if LIVE_FIXTURES.intersection(getattr(item, "fixturenames", ())):
        item.add_marker(pytest.mark.live)
    if item.get_closest_marker("root") is None and any(
            str(mark.kwargs.get("reason", "")).startswith("needs root")
            for mark in item.iter_markers("skipif")):
        item.add_marker(pytest.mark.root)


def _skip_gpu_without_cuda(items: list[pytest.Item]) -> None:
    """Tests marked `gpu` skip, with the reason, where torch sees no CUDA device (torch is imported
    only when such a test was collected, so other suites start without it)."""
    gpu_items = [item for item in items if item.get_closest_marker("gpu") is not None]
    if not gpu_items:
        return
    import torch

    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU: torch.cuda.is_available() is False")
    for item in gpu_items:
        item.add_marker(skip)


# --- --forbid-processes: every way this Python starts a process, refused while it is on -----------

# subprocess (asyncio's too) ends in its own import of fork_exec or in os.posix_spawn;
# multiprocessing's spawn/forkserver in _posixsubprocess.fork_exec; its fork and pyroute2's helpers
# in os.fork.
_PROCESS_STARTERS = [(subprocess, "_fork_exec"), (_posixsubprocess, "fork_exec"), (os, "fork"),
                     (os, "forkpty"), (os, "posix_spawn"), (os, "posix_spawnp"), (os, "system")]


class ProcessStarted(BaseException):
    """Raised where a test starts a process under --forbid-processes; a BaseException, so the code
    under test's `except Exception` cannot swallow it (and the phase's check fails it anyway)."""


_started: list[str] = []


def _refuse(name: str):
    def refuse(*args, **kwargs):
        what = f"{name}({args[0]!r:.120})" if args else name
        _started.append(what)
        raise ProcessStarted(f"{what}: this test starts a process but is not marked `live`; mark it, "
                             "or add the fixture that starts it to LIVE_FIXTURES in tests/conftest.py")
    return refuse


def pytest_configure(config: pytest.Config) -> None:
    if not config.getoption("forbid_processes"):
        return
    for module, name in _PROCESS_STARTERS:
        if hasattr(module, name):
            setattr(module, name, _refuse(name))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item):
    return (yield from _no_process_phase())


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item):
    return (yield from _no_process_phase())


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item):
    return (yield from _no_process_phase())


def _no_process_phase():
    """Fail the phase when a process start was refused in it, even where the code under test caught
    the refusal (in a thread, or with a bare `except`)."""
    _started.clear()
    result = yield
    if _started:
        what = ", ".join(_started)
        _started.clear()
        raise ProcessStarted(f"{what}: this test starts a process but is not marked `live`")
    return result
