"""The `proxy` link backend: no root, no namespaces; a TCP relay process on 127.0.0.1 that paces
and delays the bytes of the connections routed through it. The fallback when neither netem nor
tun can run.
"""

from __future__ import annotations

import logging
from typing import Any

from emulator.net.relay_backend import RelayBackend
from emulator.net.spec import LinkSpec

log = logging.getLogger(__name__)


class ProxyBackend(RelayBackend):
    """Senders reach a receiver's port through `route(port)`; client -> server bytes are shaped
    with `spec.to_local` (the KV direction: a "remote" sender connects to a "local" receiver),
    server -> client with `spec.to_remote`.

    Loss is accepted but not emulated (a TCP relay cannot drop packets); the relay says so in
    `status()["ignored"]` and its log, and `ignored_settings` names it at apply/update. Neither is
    connection set-up delayed: the kernel accepts at once, the first bytes then pay the delay.
    """

    name = "proxy"
    relay_module = "emulator.net.proxy_relay"
    description = ("proxy: TCP relay on 127.0.0.1 (no root) that paces and delays bytes per "
                   "direction; it cannot drop or reorder packets, so loss settings are accepted "
                   "but not emulated (reported in status), nor is connection set-up delayed")
    ignored_settings: list[str] = []

    @staticmethod
    def unavailable_reason() -> str | None:
        """The proxy runs anywhere a process may listen on 127.0.0.1."""
        return None

    def _relay_args(self, spec: LinkSpec) -> list[str]:
        return ["--spec", spec.model_dump_json()]

    def _started(self, info: dict[str, Any]) -> None:
        self._note_ignored(info.get("ignored", []))

    def update(self, spec: LinkSpec) -> None:
        self._note_ignored(self._request("update", spec=spec.model_dump(mode="json")).get("ignored", []))

    def route(self, dst_port: int) -> tuple[str, int]:
        """Where to connect to reach 127.0.0.1:`dst_port` through the shaped link (one listener
        per destination port, reused by later calls)."""
        reply = self._request("route", dst_port=dst_port)
        return str(reply["host"]), int(reply["port"])

    def _note_ignored(self, ignored: list[str]) -> None:
        if ignored and ignored != self.ignored_settings:
            log.warning("link backend proxy: %s not emulated (a TCP relay cannot drop packets)", ", ".join(ignored))
        self.ignored_settings = list(ignored)
