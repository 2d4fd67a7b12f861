"""Datacenters as network namespaces, joined by one shaped link: the live engine's network.

`Topology` creates the namespaces (remote, local, and any extra datacenters), lets the chosen
backend build the remote<->local link, and hands out sockets and addresses inside each datacenter.
It first claims the run id (one live run per id on the machine, emulator/net/run_lock.py); then
everything it creates goes into the run's ledger first, so `down()` (or its reaper, or `net down`
after a crash) removes it all, and a refused claim leaves nothing to remove.
"""

from __future__ import annotations

import logging
import socket
from pathlib import Path

from emulator.errors import TopologyError
from emulator.net import netns
from emulator.net.backend import LinkBackend, LinkCounters, LinkEnds
from emulator.net.ceiling import ceiling_warnings
from emulator.net.ledger import Ledger
from emulator.net.names import ifname, netns_name, new_run_id
from emulator.net.reaper import Reaper
from emulator.net.select import BackendChoice, choose_backend
from emulator.net.spec import LinkSpec
from emulator.net.state_files import write_json

log = logging.getLogger(__name__)

REMOTE, LOCAL = "remote", "local"
LOOPBACK = "127.0.0.1"
TCP_BUFFER_MAX_BYTES = 256 << 20  # long fat pipes: 5 Gbit/s x 100 ms RTT is 62.5 MB in flight, and a
# socket buffer holds about twice its window (the rest is bookkeeping), so 64 MB capped one stream
# near 2.5 Gbit/s at 100 ms (bench/link_fidelity.py)


def make_backend(name: str, ends: LinkEnds, directory: Path) -> LinkBackend:
    if name == "netem":
        from emulator.net.netem_backend import NetemBackend

        return NetemBackend.from_probe(ends)
    if name == "tun":
        from emulator.net.tun_backend import TunRelayBackend

        return TunRelayBackend(ends, directory)
    from emulator.net.proxy_backend import ProxyBackend

    return ProxyBackend(ends, directory)


class Topology:
    """Namespaces per datacenter plus the shaped remote<->local link.

    With the proxy backend there are no namespaces: every datacenter is this host's 127.0.0.1 and
    crossing the link means connecting through the relay (`target`).
    """

    def __init__(
        self,
        spec: LinkSpec,
        backend: str = "auto",
        run_id: str | None = None,
        extra_dcs: tuple[str, ...] = (),
        mtu: int = 9000,
    ) -> None:
        self.spec = spec
        self.requested = backend
        self.run_id = run_id or new_run_id()
        self.dcs = (REMOTE, LOCAL, *extra_dcs)
        self.mtu = mtu
        self.choice: BackendChoice | None = None
        self.backend: LinkBackend | None = None
        self._ends: LinkEnds | None = None
        self._reaper: Reaper | None = None
        self.ledger: Ledger | None = None  # this run's own, from up() to down(): it holds the run id
        self.warnings: list[str] = []  # the link asks more than the backend carries (ceiling.py)

    def __enter__(self) -> Topology:
        return self.up()

    def __exit__(self, *exc: object) -> None:
        self.down()

    @property
    def is_up(self) -> bool:
        return self.backend is not None

    @property
    def uses_netns(self) -> bool:
        return self.choice is not None and self.choice.name != "proxy"

    def up(self) -> Topology:
        """Claim the run id, then create namespaces and the link; a second call is a no-op.

        A run id a live run holds is refused (RunIdInUse) before anything is created or removed."""
        if self.is_up:
            return self
        ledger = self.ledger = Ledger.claim(self.run_id)
        try:
            self._reaper = Reaper(ledger)  # sweeps the run if this process dies before down()
            self.choice = choose_backend(self.requested)
            log.info("%s", self.choice.describe())
            self._warn_ceiling(self.spec)
            if self.uses_netns:
                for dc in self.dcs:
                    name = netns_name(self.run_id, dc)
                    ledger.record("netns", name=name)
                    netns.create_netns(name)
                    netns.tune_tcp(name, TCP_BUFFER_MAX_BYTES)
            self._ends = self._make_ends()
            backend = make_backend(self.choice.name, self._ends, ledger.folder)
            backend.apply(self.spec)
            self.backend = backend
            if pid := getattr(backend, "pid", None):  # a relay process: `net down` finds it after a crash
                ledger.record("pid", pid=pid)
            write_json(ledger.folder / "status.json", self.status())
        except BaseException:
            self.down()
            raise
        return self

    def _make_ends(self) -> LinkEnds:
        if not self.uses_netns:
            return LinkEnds(self.run_id, None, None, "", "", LOOPBACK, LOOPBACK, 8, self.mtu)
        return LinkEnds(
            run_id=self.run_id,
            remote_netns=netns_name(self.run_id, REMOTE),
            local_netns=netns_name(self.run_id, LOCAL),
            remote_ifname=ifname(self.run_id, "rem"),
            local_ifname=ifname(self.run_id, "loc"),
            mtu=self.mtu,
        )

    def down(self) -> list[str]:
        """Remove the link, then everything in this run's own ledger, then give the run id back; says
        what it removed. Safe to call twice, after a failure, or after a refused `up` (nothing)."""
        if self.backend is not None:
            self.backend.close()
            self.backend = None
        if self.ledger is None:
            return []
        ledger, self.ledger = self.ledger, None
        try:
            removed = ledger.teardown()
            self._release_reaper()
        finally:
            ledger.release()
        log.info("run %s: link down; removed %s", self.run_id, ", ".join(removed) or "nothing left")
        return removed

    def _release_reaper(self) -> None:
        if self._reaper is not None:
            self._reaper.release()
            self._reaper = None

    def _require_up(self) -> tuple[LinkEnds, LinkBackend]:
        if self._ends is None or self.backend is None:
            raise TopologyError("topology: call up() first")
        return self._ends, self.backend

    def netns(self, dc: str) -> str | None:
        """The namespace of datacenter `dc` (None with the proxy backend: the host's)."""
        self._require_up()
        if dc not in self.dcs:
            raise TopologyError(f"datacenter: {dc!r} is not one of {', '.join(self.dcs)}")
        return netns_name(self.run_id, dc) if self.uses_netns else None

    def address(self, dc: str) -> str:
        """The address a listener in `dc` binds to so the other side can reach it over the link."""
        ends, _ = self._require_up()
        return {REMOTE: ends.remote_addr, LOCAL: ends.local_addr}.get(dc, LOOPBACK)

    def socket(self, dc: str, family: int = socket.AF_INET, kind: int = socket.SOCK_STREAM) -> socket.socket:
        return netns.netns_socket(self.netns(dc), family, kind)

    def target(self, dst_dc: str, port: int) -> tuple[str, int]:
        """Where to connect, from the other datacenter, to reach `dst_dc`'s listener on `port`."""
        _, backend = self._require_up()
        if self.uses_netns:
            return self.address(dst_dc), port
        return backend.route(port)  # type: ignore[attr-defined]  # the proxy is the only other backend

    def update(self, spec: LinkSpec) -> None:
        """Reshape the live link (takes effect within a second; the stream keeps flowing)."""
        _, backend = self._require_up()
        backend.update(spec)
        self.spec = spec
        self._warn_ceiling(spec)

    def _warn_ceiling(self, spec: LinkSpec) -> None:
        """Warn, as each shape is applied, where it asks more than the chosen backend was measured to carry."""
        assert self.choice is not None
        self.warnings = ceiling_warnings(self.choice.name, spec)
        for line in self.warnings:
            log.warning("%s", line)

    def counters(self) -> LinkCounters:
        _, backend = self._require_up()
        return backend.counters()

    def status(self) -> dict:
        """What a run reports about its network: backend, why, namespaces and the link's shape."""
        return {
            "run_id": self.run_id,
            "backend": self.choice.name if self.choice else None,
            "reason": self.choice.reason if self.choice else None,
            "description": self.backend.description if self.backend else None,
            "namespaces": [netns_name(self.run_id, dc) for dc in self.dcs] if self.uses_netns else [],
            "spec": self.spec.model_dump(),
            "warnings": list(self.warnings),
        }
