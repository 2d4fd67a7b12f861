"""A live worker process: `python -m emulator.worker --node remote-prefill-0 --settings FILE`.

It loads the model once, says hello to the gateway over TCP on the host (at the address its settings
file names, answering its challenge with the run's secret, which arrives in $PRFAAS_WORKER_SECRET:
neither is in argv, which `ps` shows every user), and serves its commands
on one asyncio loop; torch runs on one thread and only KV sockets live in the datacenter's
namespace. It exits 0 on SIGTERM, `shutdown` or a lost gateway, 2 on bad arguments.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import signal
import socket
import sys
import time
from pathlib import Path
from typing import NoReturn

import torch

from emulator.control.types import Cluster, FailReason, NodeId, Role
from emulator.errors import PrfaasError, WorkerError
from emulator.limits import HANDSHAKE_TIMEOUT_S
from emulator.net.netns import netns_socket
from emulator.wire import protocol as p
from emulator.wire.auth import KvHelloProof, make_proof, take_secret
from emulator.wire.worker_settings import WorkerSettings, read_settings
from emulator.worker.calibration import calibrate
from emulator.worker.compute import ComputeThread
from emulator.worker.decode_engine import DecodeEngine
from emulator.worker.kv_links import KvLinks
from emulator.worker.prefill_engine import PrefillEngine
from emulator.worker.prefix_store import PrefixStore
from model_stub.config import get_preset
from model_stub.model import HybridModel, resolve_device, resolve_dtype

log = logging.getLogger(__name__)
STATS_INTERVAL_S = 0.25
# How much lower a worker's CPU priority is than its parent's. The emulated cluster yields the CPU to
# the run's control plane (gateway, broker) and the dashboard that steers it: on a small machine a
# knob must not wait behind a forward pass (2 cores, issue 26: knob to screen 0.41 -> 0.20 s median).
# Where cores are spare it changes nothing; a GPU worker waits on its device, not the CPU.
WORKER_NICE = 10
FLUSH_TIMEOUT_S = 2.0
SHUTTING_DOWN = "worker shutting down"


def make_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m emulator.worker",
                                     description="a PrfaaS Lab prefill/decode worker")
    add = parser.add_argument
    add("--node", required=True, help="remote-prefill-<i>, local-prefill-<i> or local-decode-<i>")
    add("--settings", type=Path, required=True,
        help="a WorkerSettings JSON file (wire/worker_settings.py), which names the gateway")
    return parser


def check_args(args: argparse.Namespace) -> tuple[NodeId, WorkerSettings]:
    """The node id and settings; WorkerError names the first bad one."""
    try:
        node = NodeId.parse(args.node)
    except ValueError as err:
        raise WorkerError(f"--node: {err}") from None
    settings = read_settings(args.settings)
    if settings.device == "cuda" and not torch.cuda.is_available():
        raise WorkerError("settings.device: cuda but no CUDA device is visible; use cpu or auto")
    return node, settings


def load_model(preset: str, size: str, seed: int, device: str, dtype: str) -> HybridModel:
    """Every worker builds identical weights: HybridModel seeds itself from `config.seed`. The dtype
    is announced because caches travel in it (a decode worker casts a cache of another on arrival)."""
    torch.manual_seed(seed)
    where = resolve_device(device)
    model = HybridModel(get_preset(preset, size, seed=seed, dtype=resolve_dtype(dtype, where)), device=where)
    log.info("model: %s %s on %s in %s (settings.dtype %s)", preset, size, model.device,
             model.config.dtype, dtype)
    return model


class Worker:
    def __init__(self, settings: WorkerSettings, node: NodeId, compute: ComputeThread,
                 model: HybridModel, secret: str) -> None:
        self.settings, self.node, self.compute, self.model = settings, node, compute, model
        self._secret = secret
        self.netns = settings.netns or None
        self.is_local = node.cluster is Cluster.LOCAL
        self.role: Role = node.role
        self._outbox: asyncio.Queue[p.Message | None] = asyncio.Queue()  # None: last one sent
        self._stop = asyncio.Event()
        self._role_tasks: set[asyncio.Task] = set()
        kv_proof = KvHelloProof(secret)  # the KV port proves its peers with the same secret
        self.links = KvLinks(self.netns, kv_proof, str(node), settings.connections, settings.congestion)
        store = PrefixStore(int(settings.prefix_capacity_mib * (1 << 20)))
        self.prefill = PrefillEngine(model, compute, self.links, store, self.emit,
                                     settings.speed_factor)
        self.decode = (DecodeEngine(model, compute, self.emit, kv_proof, settings.max_batch,
                                    settings.orphan_timeout_s) if self.is_local else None)

    def emit(self, msg: p.Message) -> None:
        self._outbox.put_nowait(msg)

    def _open_listener(self) -> socket.socket:
        sock = netns_socket(self.netns)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((self.settings.kv_addr, 0))
        sock.listen(128)
        return sock

    async def serve(self, gateway: tuple[str, int]) -> None:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self._stop.set)
        kv_port = None
        if self.decode is not None:
            listener = self._open_listener()
            kv_port = listener.getsockname()[1]
            await self.decode.start(listener)
        reader, writer = await asyncio.open_connection(*gateway, limit=p.STREAM_LIMIT)
        nonce = await self._read_challenge(reader)
        roles = ["prefill", "decode"] if self.is_local else ["prefill"]
        self.emit(p.Hello(node=str(self.node), roles=roles, kv_port=kv_port, pid=os.getpid(),
                          device=str(self.model.device), threads=self.compute.num_threads,
                          proof=make_proof(self._secret, nonce, str(self.node))))
        tasks = [asyncio.create_task(c) for c in (
            self._write_loop(writer), self._read_loop(reader), self._stats_loop(),
            self.prefill.run(), *((self.decode.run(), self.decode.watch()) if self.decode else ()))]
        for task in tasks:
            task.add_done_callback(self._on_service_done)
        await self._stop.wait()
        await self._shutdown(tasks, writer)

    async def _read_challenge(self, reader: asyncio.StreamReader) -> str:
        """The gateway's nonce, which the hello must answer; WorkerError if it sends anything else."""
        try:
            msg = await asyncio.wait_for(p.read_message(reader), HANDSHAKE_TIMEOUT_S)
        except TimeoutError:
            raise WorkerError(f"settings.gateway_port: no challenge within {HANDSHAKE_TIMEOUT_S:g} s; is it "
                              "this run's gateway?") from None
        if not isinstance(msg, p.Challenge):
            raise WorkerError(f"settings.gateway_port: sent {msg.op if msg else 'nothing'} before a challenge; "
                              "is it this run's gateway?")
        return msg.nonce

    def _on_service_done(self, task: asyncio.Task) -> None:
        """A service loop that ends on its own (not cancelled) leaves the worker unable to serve."""
        if not task.cancelled() and task.exception() is not None:
            log.error("%s: %s stopped", self.node, task.get_coro().__qualname__,
                      exc_info=task.exception())
            self._stop.set()

    async def _read_loop(self, reader: asyncio.StreamReader) -> None:
        try:
            while True:
                try:
                    msg = await p.read_message(reader)
                except WorkerError as err:
                    log.warning("%s: bad control message: %s", self.node, err)
                    continue
                if msg is None:
                    log.warning("%s: the gateway closed the control connection", self.node)
                    break
                self._dispatch(msg)
        except (ConnectionError, OSError) as err:
            log.warning("%s: control connection lost: %s", self.node, err)
        finally:
            self._stop.set()

    def _dispatch(self, msg: p.Message) -> None:
        if isinstance(msg, p.Prefill):
            self.prefill.submit(msg)
        elif isinstance(msg, p.Decode):
            if self.decode is None:
                self.emit(p.Failed(rid=msg.rid, stage="decode", reason=FailReason.DECODE_FAILED,
                                   detail=f"decode: {self.node} is a remote prefill node; "
                                          "send decode to a local node"))
            else:
                self.decode.submit(msg)
        elif isinstance(msg, p.Cancel):
            held = self.prefill.cancel(msg.rid) or (self.decode and self.decode.cancel(msg.rid))
            if not held:
                log.info("%s: cancel of request %d, which is not held here", self.node, msg.rid)
        elif isinstance(msg, p.SetRole):
            task = asyncio.create_task(self._set_role(msg.role))
            self._role_tasks.add(task)
            task.add_done_callback(self._role_tasks.discard)
        elif isinstance(msg, p.Shutdown):
            self._stop.set()
        elif isinstance(msg, p.Calibrate):
            task = asyncio.create_task(self._calibrate(msg))
            self._role_tasks.add(task)
            task.add_done_callback(self._role_tasks.discard)
        else:
            log.warning("%s: ignoring %s, a message workers send", self.node, msg.op)

    async def _set_role(self, role: str) -> None:
        """Drain what the current role holds, then switch and say so."""
        if not self.is_local and role != Role.PREFILL.value:
            log.warning("%s: set_role %s refused: remote nodes only prefill", self.node, role)
        else:
            engine = self.prefill if self.role is Role.PREFILL else self.decode
            await engine.drain()
            self.role = Role(role)
        self.emit(p.RoleSet(role=self.role.value))

    async def _calibrate(self, msg: p.Calibrate) -> None:
        """Time the forwards the gateway asks for; a failure is logged and left unanswered (the
        gateway's calibration times out and says so)."""
        try:
            prefill_s, step_s = await self.compute.call(calibrate, self.model, msg.lengths, msg.decode_steps)
            self.emit(p.Calibrated(prefill_s=prefill_s, decode_step_s=step_s))
        except Exception:
            log.exception("%s: calibration failed", self.node)

    async def _write_loop(self, writer: asyncio.StreamWriter) -> None:
        try:
            while (msg := await self._outbox.get()) is not None:
                await p.write_message(writer, msg)
        except (ConnectionError, OSError) as err:
            log.warning("%s: cannot write to the gateway: %s", self.node, err)
            self._stop.set()

    async def _stats_loop(self) -> None:
        while True:
            await asyncio.sleep(STATS_INTERVAL_S)
            decode_waiting = self.decode.num_waiting if self.decode else 0
            batch = self.decode.batch_size if self.decode else 0
            self.emit(p.Stats(
                t=time.monotonic(), queue_depth=self.prefill.num_queued + decode_waiting,
                batch_size=batch, role=self.role.value, link=self.links.link_stats()))

    async def _shutdown(self, tasks: list[asyncio.Task], writer: asyncio.StreamWriter) -> None:
        """Fail what is held (so nothing is lost silently), flush the reports, close everything."""
        self.prefill.fail_all(FailReason.WORKER_LOST, SHUTTING_DOWN)
        self.prefill.close()
        if self.decode is not None:
            self.decode.fail_all(FailReason.WORKER_LOST, SHUTTING_DOWN)
        self._outbox.put_nowait(None)
        for task in [*tasks[1:], *self._role_tasks]:
            task.cancel()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(tasks[0]), FLUSH_TIMEOUT_S)
        tasks[0].cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await self.links.close()
        if self.decode is not None:
            await self.decode.close()
        writer.close()
        with contextlib.suppress(ConnectionError, OSError):
            await writer.wait_closed()


async def run(settings: WorkerSettings, node: NodeId, secret: str) -> None:
    compute = ComputeThread(settings.threads)
    try:
        model = await compute.call(load_model, settings.preset, settings.size, settings.seed,
                                   settings.device, settings.dtype)
        await Worker(settings, node, compute, model, secret).serve(settings.gateway)
    finally:
        compute.shutdown()


def main(argv: list[str] | None = None) -> int:
    args = make_parser().parse_args(argv)
    try:
        node, settings = check_args(args)
        logging.basicConfig(level=logging.INFO if settings.verbose else logging.WARNING,
                            format=f"%(asctime)s {args.node} %(levelname)s %(name)s: %(message)s")
        secret = take_secret()  # out of os.environ before any child process could inherit it
        os.nice(WORKER_NICE)
        asyncio.run(run(settings, node, secret))
    except (PrfaasError, OSError) as err:
        print(f"error: {args.node}: {err}", file=sys.stderr)
        return 2
    return 0


def exit_at_once(code: int) -> NoReturn:
    """Leave without the interpreter's own teardown. By then the worker has failed what it held,
    flushed its reports and closed its sockets; what is left is torch's module finalizers and the
    join of a compute thread that may be mid-forward, 0.65 s on an idle 2-core machine and seconds
    under load, which made the run's teardown kill workers that were already done."""
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)

