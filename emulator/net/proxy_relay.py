"""The proxy relay process: TCP listeners on 127.0.0.1 that forward to local ports, shaping bytes.

    python -m emulator.net.proxy_relay --control SOCK --spec LINKSPEC_JSON

Run by `ProxyBackend`; needs no privileges. Each chunk read from a socket (at most ~2 ms of
serialisation, 4-64 KiB) is one "packet" for the direction's `DirectionShaper`, shared by every
connection in that direction: client -> server uses `spec.to_local` (senders in "remote" connect
to receivers in "local"), server -> client `spec.to_remote`. Bytes are never dropped or
reordered, so loss and `queue_packets` are not emulated: reading pauses instead (backpressure)
once the shared bottleneck holds QUEUE_TARGET_S of data or a connection holds MAX_FLOW_BYTES.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import random
import selectors
import time
from typing import Any

from emulator.errors import PrfaasError
from emulator.net.backend import TO_LOCAL, TO_REMOTE
from emulator.net.relay_control import ControlServer, RequestError, spec_from_update
from emulator.net.relay_process import (
    RelayLifecycle,
    parse_relay_args,
    startup_failed,
)
from emulator.net.shaped_stream import ShapedDirection, pump_connection
from emulator.net.spec import LinkSpec, parse_link_spec

log = logging.getLogger(__name__)

HOST = "127.0.0.1"
REQUEST_TIMEOUT_S = 5.0
MAX_ROUTES = 64
MAX_CONNECTIONS = 400  # with the routes and control sockets, fds stay below select()'s 1024


def ignored_settings(spec: LinkSpec) -> list[str]:
    """The spec's settings this relay cannot emulate (it never drops bytes)."""
    ignored = []
    for where, shape in (("", spec.to_local), ("reverse.", spec.to_remote)):
        if shape.loss_pct > 0:
            ignored.append(f"{where}loss_pct")
        if shape.loss_correlation_pct > 0:
            ignored.append(f"{where}loss_correlation_pct")
    return sorted(set(ignored))


class ProxyRelay:
    """The routes and both shaped directions; runs on one asyncio loop."""

    def __init__(self, spec: LinkSpec, lifecycle: RelayLifecycle, seed: int | None) -> None:
        rng = random.Random(seed)
        self.spec = spec
        self.directions = {
            TO_LOCAL: ShapedDirection(spec.to_local, random.Random(rng.random())),
            TO_REMOTE: ShapedDirection(spec.to_remote, random.Random(rng.random())),
        }
        self._lifecycle = lifecycle
        self._servers: dict[int, asyncio.Server] = {}
        self._connections: set[asyncio.Task[None]] = set()
        self.loop: asyncio.AbstractEventLoop | None = None

    def handle(self, request: dict[str, Any]) -> dict[str, Any]:
        """Control requests arrive on the control thread; loop state is touched on the loop."""
        op = request["op"]
        if op == "update":
            spec = spec_from_update(request)
            self._on_loop(self._reshape(spec))
            return {"ignored": ignored_settings(spec)}
        if op == "route":
            port = request.get("dst_port")
            if not isinstance(port, int) or isinstance(port, bool) or not 0 < port < 65536:
                raise RequestError(f"route: dst_port {port!r} must be an integer in 1..65535")
            return {"host": HOST, "port": self._on_loop(self._route(port))}
        if op == "counters":
            return {"counters": {name: d.counters() for name, d in self.directions.items()},
                    "at": time.monotonic()}  # when they were read
        if op == "status":
            return {"status": self._status()}
        if op == "stop":
            self._lifecycle.stop.set()
            return {}
        raise RequestError(f"unknown op {op!r}")

    async def close(self) -> None:
        for server in self._servers.values():
            server.close()
        for task in list(self._connections):
            task.cancel()
        await asyncio.gather(*self._connections, return_exceptions=True)
        for server in self._servers.values():
            await server.wait_closed()

    def _status(self) -> dict[str, Any]:
        return {"backend": "proxy", "pid": os.getpid(),
                "uptime_s": round(self._lifecycle.uptime_s(), 3),
                "spec": self.spec.model_dump(mode="json"),
                "routes": {str(dst): _port_of(server) for dst, server in self._servers.items()},
                "connections": len(self._connections),
                "ignored": ignored_settings(self.spec),
                "note": "bytes are paced and delayed, never dropped: loss and queue_packets "
                        "are not emulated"}

    def _on_loop(self, coro: Any) -> Any:
        assert self.loop is not None
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(REQUEST_TIMEOUT_S)

    async def _reshape(self, spec: LinkSpec) -> None:
        self.directions[TO_LOCAL].reshape(spec.to_local)
        self.directions[TO_REMOTE].reshape(spec.to_remote)
        self.spec = spec
        log.info("link reshaped: %s", spec.model_dump_json(exclude_defaults=True))
        if ignored_settings(spec):
            log.warning("proxy link ignores %s: it cannot drop bytes",
                        ", ".join(ignored_settings(spec)))

    async def _route(self, dst_port: int) -> int:
        if dst_port not in self._servers:
            if len(self._servers) >= MAX_ROUTES:
                raise RequestError(f"route: at most {MAX_ROUTES} routes per link")

            async def accept(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
                await self._forward(reader, writer, dst_port)

            self._servers[dst_port] = await asyncio.start_server(accept, HOST, 0)
            log.info("route 127.0.0.1:%d -> 127.0.0.1:%d", _port_of(self._servers[dst_port]),
                     dst_port)
        return _port_of(self._servers[dst_port])

    async def _forward(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter,
                       dst_port: int) -> None:
        task = asyncio.current_task()
        assert task is not None
        if len(self._connections) >= MAX_CONNECTIONS:
            log.warning("route to port %d: %d connections already; refusing another",
                        dst_port, MAX_CONNECTIONS)
            client_w.close()
            return
        self._connections.add(task)
        try:
            server_r, server_w = await asyncio.open_connection(HOST, dst_port)
        except OSError as err:
            log.info("route to port %d: connect failed (%s); closing the client", dst_port, err)
            client_w.close()
            self._connections.discard(task)
            return
        try:
            await pump_connection(client_r, client_w, server_r, server_w,
                                  self.directions[TO_LOCAL], self.directions[TO_REMOTE])
        finally:
            self._connections.discard(task)


def _port_of(server: asyncio.Server) -> int:
    return server.sockets[0].getsockname()[1]


async def serve(args: argparse.Namespace, lifecycle: RelayLifecycle) -> None:
    loop = asyncio.get_running_loop()
    lifecycle.install_signal_handlers(loop)
    lifecycle.watch_parent()
    try:
        relay = ProxyRelay(parse_link_spec(json.loads(args.spec), where="spec"), lifecycle,
                           args.seed)
        relay.loop = loop
        server = ControlServer(args.control, relay.handle)
        server.start()
    except (PrfaasError, OSError, json.JSONDecodeError) as err:
        startup_failed(f"proxy relay: {err}")
    lifecycle.announce_ready(control=args.control, ignored=ignored_settings(relay.spec))
    log.info("proxy relay up: %s", relay.spec.model_dump_json(exclude_defaults=True))
    await loop.run_in_executor(None, lifecycle.stop.wait)
    server.close()
    await relay.close()
    log.info("proxy relay stopped")


def main(argv: list[str] | None = None) -> None:
    args = parse_relay_args("python -m emulator.net.proxy_relay", argv)
    # select(2) takes its timeout in microseconds, epoll_wait(2) in whole milliseconds: with
    # epoll every delayed write would land up to 1 ms late. MAX_CONNECTIONS keeps fds < 1024.
    loop = asyncio.SelectorEventLoop(selectors.SelectSelector())
    try:
        loop.run_until_complete(serve(args, RelayLifecycle()))
    finally:
        loop.close()


if __name__ == "__main__":
    main()
