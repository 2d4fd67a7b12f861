"""iperf3 over a shaped link, the reference the link and transport benches measure against:
goodput remote -> local and each side's CPU (its process's rusage, reaped with wait4).

Bench scripts import it by its plain name, as Python puts a script's own folder first on the path."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time

from emulator.net.topology import LOCAL, REMOTE, Topology


def iperf3(topo: Topology, seconds: float, streams: int = 1, omit_first_s: bool = True) -> dict | None:
    """iperf3 -P `streams` remote -> local over `topo`'s link: {"mbit", "sender_cpu_s_per_gb",
    "receiver_cpu_s_per_gb"}, or None (no iperf3, or nothing received). `omit_first_s` drops slow
    start (a steady-state rate); a whole transfer is compared without it."""
    if not shutil.which("iperf3"):
        return None
    port = 5201 + int(topo.run_id, 16) % 1000
    wrap = (lambda ns: ["ip", "netns", "exec", ns]) if topo.uses_netns else (lambda ns: [])
    server = subprocess.Popen([*wrap(topo.netns(LOCAL)), "iperf3", "-s", "-1", "-B", topo.address(LOCAL),
                               "-p", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(0.3)
        host, target_port = topo.target(LOCAL, port)
        client = subprocess.Popen([*wrap(topo.netns(REMOTE)), "iperf3", "-c", host, "-p", str(target_port),
                                   "-t", str(seconds), *(["-O", "1"] if omit_first_s else []),
                                   "-P", str(streams), "-C", "cubic", "-J"],
                                  stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        report = json.loads((client.stdout.read() if client.stdout else "") or "{}")
        client_cpu = _reap_cpu(client, timeout_s=seconds + 30)
        server_cpu = _reap_cpu(server, timeout_s=5)
    finally:
        if server.returncode is None:
            server.kill()
            server.wait()
    received = report.get("end", {}).get("sum_received", {})
    if not received.get("bytes"):
        return None
    return {"mbit": received["bits_per_second"] / 1e6,
            "sender_cpu_s_per_gb": client_cpu / received["bytes"] * 1e9,
            "receiver_cpu_s_per_gb": server_cpu / received["bytes"] * 1e9}


def _reap_cpu(proc: subprocess.Popen, timeout_s: float) -> float:
    """Wait for `proc` and return its CPU seconds (user + system) from wait4's rusage; NaN (and the
    process killed) past `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            proc.returncode = os.waitstatus_to_exitcode(status)
            return usage.ru_utime + usage.ru_stime
        time.sleep(0.05)
    proc.kill()
    proc.wait()
    return float("nan")
