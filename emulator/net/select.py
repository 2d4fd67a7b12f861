"""Which link backend runs here, and why: netem where the kernel has it, else tun, else proxy.

The reason is part of the answer: every run states the backend it used and the reason it had to.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from emulator.errors import LinkBackendUnavailable

BACKENDS = ("netem", "tun", "proxy")


@dataclass(frozen=True, slots=True)
class BackendChoice:
    name: str
    reason: str

    def describe(self) -> str:
        return f"link backend: {self.name} ({self.reason})"


CAP_NET_ADMIN, CAP_SYS_ADMIN = 12, 21


def _effective_caps() -> int:
    for line in open("/proc/self/status"):
        if line.startswith("CapEff:"):
            return int(line.split()[1], 16)
    return 0


def _root_reason() -> str | None:
    """Why namespaces are out of reach (None when they are not): a capability check, not a uid check."""
    caps = _effective_caps()
    if caps >> CAP_NET_ADMIN & 1 and caps >> CAP_SYS_ADMIN & 1:
        return None
    who = "not root" if os.geteuid() else "root without CAP_NET_ADMIN/CAP_SYS_ADMIN"
    return f"{who} (euid {os.geteuid()}): namespaces, veth and TUN need CAP_NET_ADMIN and CAP_SYS_ADMIN"


def _tun_reason() -> str | None:
    try:
        fd = os.open("/dev/net/tun", os.O_RDWR)
    except OSError as err:
        return f"/dev/net/tun unusable: {err.strerror}"
    os.close(fd)
    return None


def _netem_reason() -> str | None:
    from emulator.net.netem_backend import probe_netem  # probing creates a throwaway namespace

    ok, reason = probe_netem()
    return None if ok else reason


def choose_backend(requested: str = "auto") -> BackendChoice:
    """Resolve `requested` (auto|netem|tun|proxy); raise LinkBackendUnavailable if it cannot run."""
    if requested not in ("auto", *BACKENDS):
        raise LinkBackendUnavailable(f"link.backend: {requested!r} is not one of auto, {', '.join(BACKENDS)}")
    if requested == "proxy":
        return BackendChoice("proxy", "requested")
    root = _root_reason()
    if root and requested != "auto":
        raise LinkBackendUnavailable(f"link backend {requested}: {root}")
    if root:
        return BackendChoice("proxy", f"{root}; the proxy paces and delays bytes but cannot drop packets")
    if requested == "tun":
        if reason := _tun_reason():
            raise LinkBackendUnavailable(f"link backend tun: {reason}")
        return BackendChoice("tun", "requested")
    netem = _netem_reason()
    if requested == "netem":
        if netem:
            raise LinkBackendUnavailable(f"link backend netem: {netem}")
        return BackendChoice("netem", "requested; kernel accepts netem")
    if not netem:
        return BackendChoice("netem", "kernel accepts netem")
    if tun := _tun_reason():
        return BackendChoice("proxy", f"netem unavailable ({netem}) and {tun}")
    return BackendChoice("tun", f"netem unavailable: {netem}")
