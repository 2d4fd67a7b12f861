"""`python -m emulator.worker.machine_probe`: one child process of `calibrate --machine`.

It loads the model as a live worker does (load_model, one torch thread, the worker's nice level) and
answers JSON-line commands on stdin with one JSON line each on stdout: time prefills through the
prefill role's own shipping path (so `kv_bytes` is the number a live run reports), their frames
sent over loopback TCP to a second probe that decodes them as a decode worker does (`listen`, then
`sink`: in a live run the receiver's work shares the machine with the prefill), time decode steps
by batch size on caches decoded from those frames (as a decode worker receives them), or stay busy
with prefills between two moments (the CPU-sharing rounds). What to measure is the parent's choice
(emulator/live/machine_profile.py); this process only times.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import socket
import statistics
import struct
import sys
import time
from collections.abc import Mapping
from typing import Any

import torch

from emulator.worker.compute import ComputeThread
from emulator.worker.decode_engine import decode_tokens
from emulator.worker.kv_shipping import LayerShipper, prefill_shipping
from emulator.worker.worker import WORKER_NICE, load_model
from model_stub.model import HybridModel
from model_stub.serialize import decode_cache

MAX_LINE_BYTES = 64 << 10
MAX_PROBE_TOKENS = 65_536  # one prompt; the parent caps its grid well below
MAX_PROBE_BATCH = 256
MAX_REPS = 100
MAX_WAIT_S = 60.0  # a busy round starts at most this far ahead
MAX_FRAME_BYTES = 1 << 30  # one shipped layer; the parent's grid stays far below
MAX_SINK_REQUESTS = 10_000
FRAME_LENGTH = struct.Struct("!I")  # each shipped frame is preceded by its length; 0 ends a request
ACCEPT_TIMEOUT_S = 30.0
WARMUP_TOKENS = 64  # the first forward after loading allocates; it is not timed
SEED = 0


class ProbeError(ValueError):
    """A command this probe cannot run; its one line goes back to the parent."""


def _int(cmd: Mapping[str, Any], key: str, lo: int, hi: int) -> int:
    value = cmd.get(key)
    if type(value) is not int or not lo <= value <= hi:
        raise ProbeError(f"{key}: {value!r} is not a whole number in {lo}..{hi}")
    return value


def _ints(cmd: Mapping[str, Any], key: str, lo: int, hi: int, max_len: int = 64) -> list[int]:
    values = cmd.get(key)
    if not isinstance(values, list) or not 1 <= len(values) <= max_len:
        raise ProbeError(f"{key}: give a list of 1 to {max_len} whole numbers")
    return [_int({key: v}, key, lo, hi) for v in values]


def _moment(cmd: Mapping[str, Any], key: str) -> float:
    value = cmd.get(key)
    now = time.monotonic()
    moment = float(value) if isinstance(value, int | float) and not isinstance(value, bool) else math.nan
    if not now - 1.0 <= moment <= now + MAX_WAIT_S:
        raise ProbeError(f"{key}: {value!r} is not a time.monotonic() moment within {MAX_WAIT_S:g} s")
    return moment


def timing_order(sizes: list[int]) -> list[int]:
    """The decode batch sizes in the order the probe times them: each once, largest first."""
    return sorted(set(sizes), reverse=True)


class Probe:
    """The loaded model and the prefill role's shipper, and the commands that time them."""

    def __init__(self, model: HybridModel) -> None:
        self.model = model
        self.shipper = LayerShipper(model.device)
        vocab = min(model.config.vocab_size, 256)
        generator = torch.Generator().manual_seed(SEED)
        self.tokens: list[int] = torch.randint(0, vocab, (MAX_PROBE_TOKENS,), generator=generator).tolist()
        self.listener: socket.socket | None = None
        self.prefill(WARMUP_TOKENS)

    def prefill(self, length: int, frames: list[bytes] | None = None,
                sink: socket.socket | None = None) -> tuple[float, int]:
        """(seconds, kv_bytes) of one prefill as the prefill role runs it: every layer encoded on the
        ship thread while the next computes, and sent to `sink` (a receiving probe) when given;
        `frames` collects them when given."""
        def send(index: int, frame: bytes) -> None:
            if frames is not None:
                frames.append(frame)
            if sink is not None:
                sink.sendall(FRAME_LENGTH.pack(len(frame)))
                sink.sendall(frame)

        start = time.perf_counter()
        _, _, report = prefill_shipping(self.model, self.tokens[:length], self.shipper, send)
        if sink is not None:
            sink.sendall(FRAME_LENGTH.pack(0))
        return time.perf_counter() - start, report.kv_bytes

    def run_prefill(self, cmd: Mapping[str, Any]) -> dict[str, Any]:
        lengths = _ints(cmd, "lengths", 1, MAX_PROBE_TOKENS)
        reps = _int(cmd, "reps", 1, MAX_REPS)
        seconds: list[list[float]] = [[] for _ in lengths]
        kv_bytes = [0] * len(lengths)
        tail = [0.0] * len(lengths)  # the last layer's share of the bytes: sent only after the prefill
        port = cmd.get("ship_to")
        sink = None
        if port is not None:
            sink = socket.create_connection(("127.0.0.1", _int(cmd, "ship_to", 1, 65535)), timeout=ACCEPT_TIMEOUT_S)
            sink.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            for rep in range(reps):  # one sweep per rep, so a slow spell spreads over every length
                for i, length in enumerate(lengths):
                    frames: list[bytes] | None = [] if rep == 0 else None
                    took_s, kv_bytes[i] = self.prefill(length, frames, sink)
                    seconds[i].append(took_s)
                    if frames:
                        tail[i] = len(frames[-1]) / max(sum(map(len, frames)), 1)
        finally:
            if sink is not None:
                sink.close()
        return {"prefill_s": seconds, "kv_bytes": kv_bytes, "tail_fraction": tail}

    def run_listen(self, cmd: Mapping[str, Any]) -> dict[str, Any]:
        """Open the loopback port a prefilling probe ships its frames to."""
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.listener.settimeout(ACCEPT_TIMEOUT_S)
        return {"port": self.listener.getsockname()[1]}

    def run_sink(self, cmd: Mapping[str, Any]) -> dict[str, Any]:
        """Take one connection and `requests` shipped caches on it, each decoded into a cache as a
        decode worker's receiver does; the byte count back."""
        requests = _int(cmd, "requests", 1, MAX_SINK_REQUESTS)
        if self.listener is None:
            raise ProbeError("sink: no listen before it")
        conn, _ = self.listener.accept()
        conn.settimeout(MAX_WAIT_S)
        received = 0
        with conn, conn.makefile("rb") as stream:
            for _ in range(requests):
                frames = []
                while (size := FRAME_LENGTH.unpack(_read_exactly(stream, FRAME_LENGTH.size))[0]) > 0:
                    if size > MAX_FRAME_BYTES:
                        raise ProbeError(f"sink: a frame of {size:,} bytes is over {MAX_FRAME_BYTES:,}")
                    frames.append(_read_exactly(stream, size))
                    received += size
                decode_cache(frames, self.model.config, self.model.device)
        return {"bytes": received}

    def run_decode(self, cmd: Mapping[str, Any]) -> dict[str, Any]:
        """The median step of each batch size, on caches of `cache_tokens` decoded from one
        prefill's frames; one untimed step first (the batch's tensors are allocated then)."""
        cache_tokens = _int(cmd, "cache_tokens", 1, MAX_PROBE_TOKENS)
        sizes = _ints(cmd, "batch_sizes", 1, MAX_PROBE_BATCH)
        steps = _int(cmd, "steps", 1, MAX_REPS)
        frames: list[bytes] = []
        self.prefill(cache_tokens, frames)
        caches = [decode_cache(frames, self.model.config, self.model.device) for _ in range(max(sizes))]
        return {"step_s": asyncio.run(self._decode_steps(caches, sizes, steps, cache_tokens))}

    async def _decode_steps(self, caches: list[Any], sizes: list[int], steps: int, cache_tokens: int) -> list[float]:
        """Each step as the decode role takes it: awaited from the event loop on the worker's one
        torch thread (ComputeThread), so the hop between the two threads is in the time. The sizes
        are timed largest first (answered in the order asked): a decode worker in a run has held
        its larger batches before, and glibc's allocator serves a size it has already freed from
        its heap, while a batch larger than any before maps fresh pages at every step (this VM,
        batch 4: 52-64 ms a step timed after the smaller ones, 33-36 ms after batch 8, as a run's
        decode worker takes them)."""
        compute = ComputeThread(1)
        step_s: dict[int, float] = {}
        try:
            for size in timing_order(sizes):
                batch, tokens = caches[:size], [self.tokens[cache_tokens % MAX_PROBE_TOKENS]] * size
                tokens = await compute.call(decode_tokens, self.model, tokens, batch)
                times = []
                for _ in range(steps):
                    start = time.perf_counter()
                    tokens = await compute.call(decode_tokens, self.model, tokens, batch)
                    times.append(time.perf_counter() - start)
                step_s[size] = statistics.median(times)
        finally:
            compute.shutdown()
        return [step_s[size] for size in sizes]

    def run_busy(self, cmd: Mapping[str, Any]) -> dict[str, Any]:
        """Prefills of `tokens` back to back from `start_at` until one ends after `stop_at`; the
        times of those that ended by `stop_at` (all the round's probes were busy throughout)."""
        length = _int(cmd, "tokens", 1, MAX_PROBE_TOKENS)
        start_at, stop_at = _moment(cmd, "start_at"), _moment(cmd, "stop_at")
        time.sleep(max(0.0, start_at - time.monotonic()))
        inside, last = [], 0.0
        while True:
            begin = time.monotonic()
            self.prefill(length)
            end = time.monotonic()
            last = end - begin
            if end > stop_at:
                break
            inside.append(last)
        return {"op_s": inside or [last]}  # one op longer than the window: the one that crossed it

    def close(self) -> None:
        self.shipper.close()
        if self.listener is not None:
            self.listener.close()


def _read_exactly(stream: Any, size: int) -> bytes:
    data = stream.read(size)
    if len(data) != size:
        raise ProbeError(f"sink: the connection closed {len(data)} bytes into a {size}-byte read")
    return data


COMMANDS = {"prefill": Probe.run_prefill, "decode": Probe.run_decode, "busy": Probe.run_busy,
            "listen": Probe.run_listen, "sink": Probe.run_sink}


def _reply(doc: Mapping[str, Any]) -> None:
    sys.stdout.write(json.dumps(doc) + "\n")
    sys.stdout.flush()


def _read_command() -> dict[str, Any] | None:
    line = sys.stdin.readline(MAX_LINE_BYTES + 1)
    if not line:
        return None
    if len(line) > MAX_LINE_BYTES:
        raise ProbeError(f"a command longer than {MAX_LINE_BYTES:,} bytes")
    cmd = json.loads(line)
    if not isinstance(cmd, dict):
        raise ProbeError("a command is a JSON object")
    return cmd


def main() -> int:
    """First line: {"op": "load", "preset", "size", "seed"}; then one command per line until
    {"op": "quit"} or the end of stdin. Every answer is one JSON line; an error is {"error": line}."""
    torch.set_num_threads(1)  # the live worker's ComputeThread(1)
    try:
        os.nice(WORKER_NICE)
    except OSError:  # a priority limit: time at the parent's priority
        pass
    probe = None
    try:
        load = _read_command() or {}
        if load.get("op") != "load":
            raise ProbeError("the first command must be load")
        model = load_model(str(load.get("preset")), str(load.get("size")), _int(load, "seed", 0, 2**32 - 1),
                           "cpu", "auto")
        probe = Probe(model)
        _reply({"ready": True, "pid": os.getpid(), "nice": os.nice(0), "threads": torch.get_num_threads()})
        while (cmd := _read_command()) is not None and cmd.get("op") != "quit":
            run = COMMANDS.get(str(cmd.get("op")))
            if run is None:
                raise ProbeError(f"op: {cmd.get('op')!r} is not one of {', '.join(COMMANDS)}")
            _reply(run(probe, cmd))
    except (ProbeError, ValueError, KeyError, OSError) as err:
        _reply({"error": " ".join(str(err).split())})
        return 2
    finally:
        if probe is not None:
            probe.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
