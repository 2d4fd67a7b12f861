"""The `proxy` link backend: no root, no namespaces; a TCP relay process on 127.0.0.1 that paces
and delays the bytes of the connections routed through it. The fallback when neither netem nor
tun can run.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from emulator.errors import TopologyError
from emulator.net.backend import LinkCounters, LinkEnds
from emulator.net.relay_process import RelayProcess, default_run_dir
from emulator.net.spec import LinkSpec
from emulator.net.tun_backend import counters_from_reply

log = logging.getLogger(__name__)


class ProxyBackend:
    """LinkBackend over `emulator.net.proxy_relay`. Senders reach a receiver's port through
    `route(port)`; client -> server bytes are shaped with `spec.to_local` (the KV direction: a
    "remote" sender connects to a "local" receiver), server -> client with `spec.to_remote`.

    Loss is accepted but not emulated (a TCP relay cannot drop packets); the relay says so in
    `status()["ignored"]` and its log, and `ignored_settings` names it at apply/update. Neither is
    connection set-up delayed: the kernel accepts at once, the first bytes then pay the delay.
    """

    name = "proxy"
    description = ("proxy: TCP relay on 127.0.0.1 (no root) that paces and delays bytes per "
                   "direction; it cannot drop or reorder packets, so loss settings are accepted "
                   "but not emulated (reported in status), nor is connection set-up delayed")

    def __init__(self, ends: LinkEnds, run_dir: Path | None = None, seed: int | None = None,
                 start_timeout_s: float = 10.0) -> None:
        self.ends = ends
        self._run_dir = run_dir
        self._seed = seed
        self._start_timeout_s = start_timeout_s
        self._relay: RelayProcess | None = None
        self.ignored_settings: list[str] = []

    @staticmethod
    def unavailable_reason() -> str | None:
        """The proxy runs anywhere a process may listen on 127.0.0.1."""
        return None

    @property
    def pid(self) -> int | None:
        return self._relay.pid if self._relay is not None else None

    def apply(self, spec: LinkSpec) -> None:
        """Start the relay with `spec`; on a running link this is `update`."""
        if self._relay is not None:
            self.update(spec)
            return
        run_dir = self._run_dir or default_run_dir(self.ends.run_id)
        args = ["--spec", spec.model_dump_json()]
        if self._seed is not None:
            args += ["--seed", str(self._seed)]
        name = f"proxy-{self.ends.remote_ifname or 'link'}"
        self._relay = RelayProcess("emulator.net.proxy_relay", name, args, run_dir,
                                   self._start_timeout_s)
        self._note_ignored(self._relay.info.get("ignored", []))
        log.info("link backend: proxy relay pid %d on 127.0.0.1", self._relay.pid)

    def update(self, spec: LinkSpec) -> None:
        reply = self._running().request("update", spec=spec.model_dump(mode="json"))
        self._note_ignored(reply.get("ignored", []))

    def route(self, dst_port: int) -> tuple[str, int]:
        """Where to connect to reach 127.0.0.1:`dst_port` through the shaped link (one listener
        per destination port, reused by later calls)."""
        reply = self._running().request("route", dst_port=dst_port)
        return str(reply["host"]), int(reply["port"])

    def counters(self) -> LinkCounters:
        """Chunks count as packets; drops are always 0."""
        return counters_from_reply(self._running().request("counters"))

    def status(self) -> dict[str, Any]:
        return self._running().request("status")["status"]

    def close(self) -> None:
        if self._relay is not None:
            relay, self._relay = self._relay, None
            relay.stop()

    def _note_ignored(self, ignored: list[str]) -> None:
        if ignored and ignored != self.ignored_settings:
            log.warning("link backend proxy: %s not emulated (a TCP relay cannot drop packets)",
                        ", ".join(ignored))
        self.ignored_settings = list(ignored)

    def _running(self) -> RelayProcess:
        if self._relay is None:
            raise TopologyError("proxy backend: link is not applied; call apply(spec) first")
        if not self._relay.is_alive():
            raise TopologyError(f"proxy backend: relay {self._relay.pid} died; "
                                f"see {self._relay.log_path}")
        return self._relay
