"""Caches sent layer by layer as they are produced, on the tun link, beside the fluid's prediction
(bench/link_tcp.py's pipelined rows), and the loss constant for such caches that fits them
(emulator/virtual/tcp.py's LOSS_C, which whole caches share).

Two producers, one kept sender each (its connections stay open across the rows, as a worker's do):
- synthetic: bench/kv_peer.py sends kimi-linear-mini's 8 frames of a 2.5 MB cache, frame i at
  (i + 1) / 8 of PRODUCE_S: the network alone;
- prefill: a real prefill of kimi-linear-mini (small, 1 torch thread) in this process hands each
  layer to a KVSender in the same process, as the live worker does: the network and the worker's
  compute sharing a process and the machine's cores with the relay.
"""

from __future__ import annotations

import asyncio
import math
import statistics
import time
from dataclasses import replace
from typing import Any

import torch

from emulator.net.topology import LOCAL, REMOTE, Topology
from emulator.transport.sender import KVSender
from emulator.virtual.link import LinkState
from emulator.virtual.link_replay import pipelined_seconds
from emulator.virtual.tcp import PACKET_BYTES
from emulator.wire.auth import KvHelloProof
from model_stub import HybridModel, get_preset
from model_stub.serialize import encode_layer

from kv_peer import synthetic_frames
from transport import ROOT, SECRET, KVPair, start_receiver  # bench/, first on a script's path

PRESET = "kimi-linear-mini"  # the live scenarios' model: 8 layers, the 2 MLA ones hold most bytes
SYNTHETIC_MB, PRODUCE_S, GAP_S = 2.5, 0.6, 0.3  # a long prompt's cache on the small preset
# A worker's caches at the fidelity matrix's pace, seconds apart: after an idle spell longer than
# the retransmission timeout Linux shrinks an application-limited window (RFC 7661's cwnd
# validation; tcp_slow_start_after_idle=0 does not stop it), which a lossy link takes long to regrow.
IDLE_GAP_S = 1.5
PREFILL_TOKENS = 2048  # the fidelity matrix's longest prompt


def synthetic_row(pair: KVPair, state: LinkState, point: dict, first_id: int, repeats: int) -> dict:
    """`repeats` caches from the kept kv_peer pair, GAP_S apart, first layer to the cache held."""
    times = []
    for k in range(repeats):
        time.sleep(GAP_S)
        pair.sender.write({"request_id": first_id + k, "produce_s": PRODUCE_S})
        ready, start = pair.receiver.read()["ready_s"], pair.sender.read()["start_s"]
        times.append(ready - start)
    _, frames = synthetic_frames(SYNTHETIC_MB, PRESET)
    return _row("synthetic", state, point, [len(f) for f in frames], [PRODUCE_S] * repeats, times)


def prefill_row(topo: Topology, state: LinkState, point: dict, repeats: int, gap_s: float = GAP_S) -> dict:
    """`repeats` real prefills of PREFILL_TOKENS, `gap_s` apart, each layer sent as it finishes;
    measured from the prefill's start to the receiver holding the cache. Rows with a gap other
    than GAP_S are kind "prefill_after_idle" (the loss constant's fit reads "prefill" rows only)."""
    torch.set_num_threads(1)
    model = HybridModel(get_preset(PRESET), device="cpu")
    prompt = torch.randint(0, 256, (PREFILL_TOKENS,), generator=torch.Generator().manual_seed(7))
    n = model.config.num_layers
    receiver, port = start_receiver(topo, ROOT, PRESET)

    async def body() -> tuple[list[float], list[float], list[int]]:
        sender = KVSender(lambda: topo.socket(REMOTE), topo.target(LOCAL, port), proof=KvHelloProof(SECRET),
                          sender_id="remote-prefill-0", num_connections=4)
        await sender.start()
        loop = asyncio.get_running_loop()
        produce, total, sizes = [], [], []
        try:
            for k in range(repeats):
                await asyncio.sleep(gap_s)
                frames: list[bytes] = []

                def on_layer(i: int, layer: Any, rid: int = 100 + k) -> None:
                    frames.append(encode_layer(i, layer, PREFILL_TOKENS))
                    sender.send_layer(rid, i, n, frames[-1])

                start = time.monotonic()
                await loop.run_in_executor(None, lambda: model.prefill(prompt, on_layer_done=on_layer))
                produce.append(time.monotonic() - start)
                ready = await loop.run_in_executor(None, receiver.read)
                total.append(ready["ready_s"] - start)
                sizes = [len(f) for f in frames]
        finally:
            await sender.close()
        return produce, total, sizes

    try:
        produce, total, sizes = asyncio.run(body())
    finally:
        receiver.close()
    kind = "prefill" if gap_s == GAP_S else "prefill_after_idle"
    return {**_row(kind, state, point, sizes, produce, total), "gap_s": gap_s}


def _row(kind: str, state: LinkState, point: dict, layer_bytes: list[int], produce: list[float],
         times: list[float]) -> dict:
    produce_s, num_bytes = statistics.median(produce), sum(layer_bytes)
    return {**point, "kind": kind, "bytes": num_bytes, "tail_bytes": layer_bytes[-1], "layer_bytes": layer_bytes,
            "produce_s": produce_s, "s": times, "median_s": statistics.median(times), "mean_s": statistics.fmean(times),
            "model_s": pipelined_seconds(state, num_bytes, produce_s, shares(layer_bytes))}


def shares(layer_bytes: list[int]) -> tuple[float, ...]:
    total = sum(layer_bytes)
    return tuple(size / total for size in layer_bytes)


def fit_loss_c(rows: list[dict], state_of: Any) -> float | None:
    """The constant that best fits the lossy rows: least squares of log(model / measured mean)
    over a grid of 0.05 steps from 0.25 to 6; `state_of(point)` gives each row's link. Means, not medians: loss
    skews a row's times right (a tail loss waits a probe timeout) and TTFT's mean is the goal."""
    lossy = [row for row in rows if row.get("loss_pct")]
    if not lossy:
        return None

    def misfit(c: float) -> float:
        return sum(math.log(pipelined_seconds(replace(state_of(_point(row)), loss_c=c), row["bytes"],
                                              row["produce_s"], shares(row["layer_bytes"])) / row["mean_s"]) ** 2
                   for row in lossy)

    return min((0.05 * k for k in range(5, 121)), key=misfit)


def fit_loss_spread(rows: list[dict]) -> float | None:
    """tcp.LOSS_SPREAD from the lossy prefill rows: how widely a cache's time after its prefill
    spreads (standard deviation over mean), times the square root of the loss events a cache
    expects (loss x its packets: the fewer, the wider; tcp.loss_time_cv), the median over rows."""
    spreads = []
    for row in rows:
        if row.get("loss_pct") and row["kind"].startswith("prefill") and len(row["s"]) > 2:
            after = [s - row["produce_s"] for s in row["s"]]
            events = row["loss_pct"] / 100 * row["bytes"] / PACKET_BYTES
            spreads.append(statistics.stdev(after) / statistics.fmean(after) * math.sqrt(max(events, 1.0)))
    return statistics.median(spreads) if spreads else None


def _point(row: dict) -> dict:
    return {k: row[k] for k in ("bandwidth_mbit", "delay_ms", "loss_pct") if k in row}
