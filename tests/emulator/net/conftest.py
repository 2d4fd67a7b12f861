"""Fixtures for link tests: root checks and run ids whose kernel objects are always removed."""

from __future__ import annotations

import os
import subprocess

import pytest

from emulator.net.names import new_run_id

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root: namespaces, veth and TUN need CAP_NET_ADMIN")


def kernel_has_netem() -> bool:
    """An independent check with iproute2's tc in a throwaway namespace (not the code under test)."""
    ns = f"prf-{new_run_id()}-probe"
    try:
        subprocess.run(["ip", "netns", "add", ns], check=True, capture_output=True)
        tc = subprocess.run(
            ["ip", "netns", "exec", ns, "tc", "qdisc", "add", "dev", "lo", "root", "netem", "delay", "1ms"],
            capture_output=True,
        )
        return tc.returncode == 0
    finally:
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)
