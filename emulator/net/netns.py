"""Network namespaces: create, remove, list by prefix, and run code or open sockets inside one.

A namespace is entered only by a short-lived thread (setns acts on the calling thread), so the
caller's own thread, and any event loop on it, never changes namespace. Sockets and TUN devices
keep the namespace they were created in after that thread is gone.
"""

from __future__ import annotations

import os
import socket
import threading
from collections.abc import Callable
from typing import TypeVar

from pyroute2 import netns as _netns

from emulator.errors import TopologyError

T = TypeVar("T")
NETNS_DIR = "/var/run/netns"


def list_netns(prefix: str = "") -> list[str]:
    return sorted(n for n in _netns.listnetns() if n.startswith(prefix))


def create_netns(name: str) -> None:
    """Create `name` (idempotent) with its loopback up."""
    if name not in _netns.listnetns():
        try:
            _netns.create(name)
        except OSError as err:
            raise TopologyError(f"netns {name}: cannot create ({err.strerror}); run as root") from None
    from pyroute2 import NetNS  # imported late: constructing it forks a helper

    with NetNS(name) as ns:
        ns.link("set", index=ns.link_lookup(ifname="lo")[0], state="up")


def remove_netns(name: str) -> bool:
    """Remove `name`; False when it was already gone."""
    if name not in _netns.listnetns():
        return False
    _netns.remove(name)
    return True


def run_in_netns(name: str | None, fn: Callable[[], T]) -> T:
    """Run `fn` in a thread that entered namespace `name` (None: the caller's namespace)."""
    if name is None:
        return fn()
    box: dict[str, object] = {}

    def target() -> None:
        try:
            _netns.setns(name, flags=0, fork=False)
            box["value"] = fn()
        except BaseException as err:  # handed back to the caller's thread below
            box["error"] = err

    thread = threading.Thread(target=target, name=f"netns-{name}", daemon=True)
    thread.start()
    thread.join()
    if "error" in box:
        err = box["error"]
        if isinstance(err, OSError) and not isinstance(err, TopologyError):
            raise TopologyError(f"netns {name}: {err}") from err
        raise err  # type: ignore[misc]
    return box["value"]  # type: ignore[return-value]


def netns_socket(name: str | None, family: int = socket.AF_INET, kind: int = socket.SOCK_STREAM) -> socket.socket:
    """A socket that lives in namespace `name` (None: this one)."""
    return run_in_netns(name, lambda: socket.socket(family, kind))


def tune_tcp(name: str, max_bytes: int) -> None:
    """Tune `name` as a cross-DC host: one stream can fill a long fat pipe (1 Gbit/s x 100 ms needs
    12.5 MB in flight), and an idle connection keeps its congestion window.

    tcp_rmem/tcp_wmem are per namespace, and /proc/sys/net shows the namespace of the thread that
    opens it, so the write happens from inside.
    """

    def write() -> None:
        for key in ("tcp_rmem", "tcp_wmem"):
            with open(f"/proc/sys/net/ipv4/{key}") as f:
                low, default, _ = f.read().split()
            with open(f"/proc/sys/net/ipv4/{key}", "w") as f:
                f.write(f"{low} {default} {max_bytes}")
        # layer-wise KV streams go quiet between layers; restarting slow start after each pause
        # would expose the last layer's transfer to several extra round trips
        with open("/proc/sys/net/ipv4/tcp_slow_start_after_idle", "w") as f:
            f.write("0")

    run_in_netns(name, write)


def netns_path(name: str) -> str:
    return os.path.join(NETNS_DIR, name)


def pids_in(name: str) -> list[int]:
    """Processes with any thread inside namespace `name` (what `ip netns pids` lists, threads too);
    [] when it does not exist. Processes this user may not inspect are not seen."""
    try:
        target = os.stat(netns_path(name))
    except OSError:
        return []
    key, found = (target.st_dev, target.st_ino), []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for tid in tids:
            try:
                info = os.stat(f"/proc/{pid}/task/{tid}/ns/net")
            except OSError:
                continue
            if (info.st_dev, info.st_ino) == key:
                found.append(int(pid))
                break
    return sorted(found)
