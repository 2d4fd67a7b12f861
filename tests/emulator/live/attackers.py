"""Hostile local processes for live tests (issue 25): what another user, or root inside a run's
namespaces, can do to a run's ports. Each is a plain `/usr/bin/python3` script (nothing of the
project, so it also runs as a user who cannot read the checkout), started and killed by the test.

Finding the ports is not what is tested (any user can list listening sockets); the test names the
run's own listeners, so that other programs on the machine are never attacked.
"""

from __future__ import annotations

import os
import socket
import struct
import subprocess
from pathlib import Path

PYTHON = "/usr/bin/python3"
NOBODY = 65534
LISTEN = "0A"  # TCP_LISTEN in /proc/net/tcp

# Keeps `count` silent connections to 127.0.0.1:<port read from stdin>, reopening each one the
# gateway closes after `pause` seconds: the worker-port slot attack of the report.
SILENT_HOLDER = """
import socket, sys, time
count, pause = int(sys.argv[1]), float(sys.argv[2])
port = int(sys.stdin.readline())
conns, opened = [], 0
while True:
    for c in list(conns):
        try:
            if c.recv(4096) == b"":
                raise OSError
        except BlockingIOError:
            pass
        except OSError:
            c.close()
            conns.remove(c)
    while len(conns) < count:
        try:
            c = socket.create_connection(("127.0.0.1", port), timeout=1)
        except OSError:
            break
        c.setblocking(False)
        conns.append(c)
        opened += 1
        print(opened, flush=True)
    time.sleep(pause)
"""

# Inside a namespace, against a decode worker's KV port: first, unproven, a chunk for each request id
# 1..200 that the receiver refuses (one layer claiming 1 GiB; the poisoning of the report), sent again
# every half second; then `count` connections at once that send a HELLO (the proof-less one every
# sender sent before issue 25) and nothing more, each reopened a second after it is closed.
KV_ATTACKER = """
import asyncio, struct, sys, zlib
host, port, count, version = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
def frame(type_, rid=0, num_layers=0, num_chunks=0, layer_bytes=0, payload=b""):
    body = struct.pack("<4sBBBBQHHIIQQII", b"PKVC", version, type_, 0, 0, rid, 0, num_layers, 0, num_chunks,
                       layer_bytes, 0, len(payload), zlib.crc32(payload))
    return body + struct.pack("<I", zlib.crc32(body)) + payload
HELLO = frame(6)
POISON = b"".join(frame(1, rid, 1, 2, 1 << 30, b"7 bytes") for rid in range(1, 201))
async def send(data, hold):
    try:
        reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), 5)
        writer.write(data)
        await writer.drain()
        while hold and await reader.read(65536):
            pass
        writer.close()
    except (OSError, asyncio.TimeoutError):
        pass
async def holder():
    while True:
        await send(HELLO, True)
        await asyncio.sleep(1.0)
async def poisoner():
    while True:
        await send(POISON, False)
        await asyncio.sleep(0.5)
async def main():
    await send(POISON, False)
    await asyncio.gather(poisoner(), *(holder() for _ in range(count)))
asyncio.run(main())
"""

# Run as another user: which of the given paths it can read (a worker's argv, its environment, its
# settings file), as a line "path<TAB>readable|denied|gone".
READER = """
import sys
for path in sys.argv[1:]:
    try:
        with open(path, "rb") as f:
            f.read()
        print(path + "\\treadable")
    except PermissionError:
        print(path + "\\tdenied")
    except OSError:
        print(path + "\\tgone")
"""


def as_nobody(script: str, *args: str, **popen: object) -> subprocess.Popen:
    return subprocess.Popen([PYTHON, "-c", script, *args], user=NOBODY, cwd="/", **popen)


def in_netns(netns: str, script: str, *args: str, **popen: object) -> subprocess.Popen:
    return subprocess.Popen(["ip", "netns", "exec", netns, PYTHON, "-c", script, *args], cwd="/", **popen)


def readable_by_nobody(paths: list[str]) -> dict[str, str]:
    done = subprocess.run([PYTHON, "-c", READER, *paths], user=NOBODY, cwd="/", capture_output=True, text=True,
                          timeout=60, check=True)
    return dict(line.split("\t") for line in done.stdout.splitlines())


def _listeners(table: str) -> dict[int, tuple[str, int]]:
    """inode -> (address, port) of the LISTEN sockets in a /proc/net/tcp text."""
    found = {}
    for line in table.splitlines()[1:]:
        fields = line.split()
        if fields[3] != LISTEN:
            continue
        host, port = fields[1].split(":")
        address = socket.inet_ntoa(struct.pack("<I", int(host, 16)))
        found[int(fields[9])] = (address, int(port, 16))
    return found


def own_listening_ports(pid: int) -> set[int]:
    """The TCP ports process `pid` listens on (its socket inodes among the host's listeners)."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(int(target[8:-1]))
    listeners = _listeners(Path("/proc/net/tcp").read_text())
    return {port for inode, (_, port) in listeners.items() if inode in inodes}


def netns_listeners(netns: str) -> set[tuple[str, int]]:
    """(address, port) of every TCP listener inside namespace `netns`."""
    done = subprocess.run(["ip", "netns", "exec", netns, "cat", "/proc/net/tcp"], capture_output=True, text=True,
                          timeout=30)
    return set(_listeners(done.stdout).values()) if done.returncode == 0 else set()
