"""KV transport over a shaped link: goodput vs iperf3, the multi-connection effect, and pipelining.

Three questions, each measured side by side in one run on the same `tun` link:
  1. goodput of one KV transfer (N connections) vs `iperf3 -P N` at 100 Mbit/s/10 ms, 1 Gbit/s/20 ms;
  2. 1 vs 2, 4, 8 connections at 40 ms RTT with 0.5 % loss and cubic (the Mathis effect);
  3. exposed transfer time after the last prefill layer, pipelined vs not, for a real prefill.
Writes bench/results/transport.json and prints a short table. Needs root.

    python bench/transport.py [--quick] [--check]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import subprocess
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.link_fidelity import iperf3  # noqa: E402
from emulator.net.spec import parse_link_spec  # noqa: E402
from emulator.net.topology import LOCAL, REMOTE, Topology  # noqa: E402
from emulator.transport.receiver import KVReceiver  # noqa: E402
from emulator.transport.sender import KVSender  # noqa: E402
from emulator.wire.auth import KvHelloProof, new_secret  # noqa: E402
from emulator.worker.kv_decoder import ModelKVDecoder  # noqa: E402
from model_stub import HybridModel, get_preset  # noqa: E402
from model_stub.cache import HybridCache, LayerCache, expected_shapes  # noqa: E402
from model_stub.serialize import encode_cache, encode_layer  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results" / "transport.json"


def synthetic_frames(megabytes: float) -> tuple[str, list[bytes]]:
    """Layer frames of a dense-model cache of about `megabytes` (random values, real format)."""
    config = get_preset("dense-gqa-mini")
    tokens = max(64, int(megabytes * 2**20 / config.kv_bytes_per_token()))
    gen = torch.Generator().manual_seed(0)
    layers = [LayerCache(k, tuple(torch.randn(s, generator=gen) for s in expected_shapes(config, k, tokens)))
              for k in config.layer_kinds]
    return config.name, list(encode_cache(HybridCache(config, layers, tokens)))


SECRET = new_secret()  # both sides prove it, as a run's workers do (one HELLO per connection)


def _receiver_process(netns: str | None, addr: str, preset: str, secret: str, conn) -> None:
    """The decode side, in its own process as a decode worker would be: listen, rebuild, report.

    Sends the listening port, then (request id, monotonic time) as each cache is whole; exits when
    the parent sends anything. CLOCK_MONOTONIC is system-wide, so the parent can compare times.
    """
    from emulator.net.netns import netns_socket

    async def main() -> None:
        listener = netns_socket(netns)
        listener.bind((addr, 0))
        listener.listen()
        receiver = KVReceiver(ModelKVDecoder(get_preset(preset)), lambda rid, cache: conn.send((rid, time.monotonic())),
                              proof=KvHelloProof(secret))
        await receiver.start(listener)
        conn.send(listener.getsockname()[1])
        await asyncio.get_running_loop().run_in_executor(None, conn.recv)
        await receiver.close()

    asyncio.run(main())


class ReceiverProcess:
    """A KVReceiver in a separate process inside `dc`'s namespace (sender and receiver each get a
    core, as prefill and decode workers do; one shared event loop would halve both)."""

    def __init__(self, topo: Topology, preset: str) -> None:
        ctx = multiprocessing.get_context("spawn")
        self._conn, child = ctx.Pipe()
        args = (topo.netns(LOCAL), topo.address(LOCAL), preset, SECRET, child)
        self._proc = ctx.Process(target=_receiver_process, args=args)
        self._proc.start()
        if not self._conn.poll(60):
            raise RuntimeError("receiver process did not start")
        self.port = self._conn.recv()

    def ready_at(self, timeout_s: float = 60) -> float:
        """When the receiver held the next whole cache (monotonic seconds)."""
        if not self._conn.poll(timeout_s):
            raise RuntimeError("receiver reported no cache")
        return self._conn.recv()[1]

    def close(self) -> None:
        self._conn.send("stop")
        self._proc.join(10)
        if self._proc.is_alive():
            self._proc.kill()


async def _with_link(topo: Topology, preset: str, connections: int, body):
    """A receiver process in `local`, a sender in `remote`; runs `body(sender, receiver)`."""
    receiver = ReceiverProcess(topo, preset)
    sender = KVSender(lambda: topo.socket(REMOTE), topo.target(LOCAL, receiver.port), proof=KvHelloProof(SECRET),
                      sender_id="remote-prefill-0", num_connections=connections)
    try:
        await sender.start()
        return await body(sender, receiver)
    finally:
        await sender.close()
        receiver.close()


def transfer_goodput(topo: Topology, preset: str, frames: list[bytes], connections: int) -> float:
    """Bits per second of one whole transfer: from the first send until the receiver holds the
    rebuilt cache (measured where the data lands, as iperf3's receiver-side figure is)."""

    async def body(sender, receiver):
        start = time.monotonic()
        for i, frame in enumerate(frames):
            sender.send_layer(1, i, len(frames), frame)
        result = await sender.finish(1, deadline_s=300)
        assert result.status == "delivered", result
        ready_at = await asyncio.get_running_loop().run_in_executor(None, receiver.ready_at)
        return sum(map(len, frames)) * 8 / (ready_at - start)

    return asyncio.run(_with_link(topo, preset, connections, body))


def exposed_time(topo: Topology, model: HybridModel, tokens: int, pipelined: bool) -> dict:
    """Seconds from the prefill's end until the receiver holds the cache, layers shipped as they finish or after."""
    prompt = torch.randint(0, 256, (tokens,), generator=torch.Generator().manual_seed(tokens))
    n = model.config.num_layers

    async def body(sender, receiver):
        frames: list[bytes] = []

        def on_layer(i, layer):
            frame = encode_layer(i, layer, tokens)
            frames.append(frame)
            if pipelined:
                sender.send_layer(3, i, n, frame)

        start = time.monotonic()
        await asyncio.get_running_loop().run_in_executor(None, lambda: model.prefill(prompt, on_layer_done=on_layer))
        prefill_end = time.monotonic()
        if not pipelined:
            for i, frame in enumerate(frames):
                sender.send_layer(3, i, n, frame)
        result = await sender.finish(3, deadline_s=300)
        assert result.status == "delivered", result
        # exposed: until the decode side holds the whole cache (the DONE reply is not on that path)
        ready_at = await asyncio.get_running_loop().run_in_executor(None, receiver.ready_at)
        return {"prefill_s": prefill_end - start, "exposed_s": ready_at - prefill_end,
                "largest_layer_bytes": max(map(len, frames)), "bytes": sum(map(len, frames))}

    return asyncio.run(_with_link(topo, model.config.name, 4, body))


def bench_vs_iperf(quick: bool) -> list[dict]:
    rows = []
    for mbit, delay in [(100, 10)] if quick else [(100, 10), (1000, 20)]:
        preset, frames = synthetic_frames(mbit / 8 * (2 if quick else 3))
        with Topology(parse_link_spec({"bandwidth_mbit": mbit, "delay_ms": delay}), backend="tun") as topo:
            ours = transfer_goodput(topo, preset, frames, 4)
            theirs = iperf3(topo, 2 if quick else 3, streams=4, omit_first_s=False)
        rows.append({"mbit": mbit, "delay_ms": delay, "connections": 4, "ours_mbit": ours / 1e6,
                     "iperf3_mbit": theirs / 1e6 if theirs else None, "ratio": ours / theirs if theirs else None})
    return rows


def bench_connections(quick: bool) -> list[dict]:
    preset, frames = synthetic_frames(32 if quick else 96)  # long enough for steady state, not slow start
    rows = []
    spec = parse_link_spec({"bandwidth_mbit": 1000, "delay_ms": 20, "loss_pct": 0.5})
    with Topology(spec, backend="tun") as topo:
        for n in (1, 8) if quick else (1, 2, 4, 8):
            rows.append({"connections": n, "mbit": transfer_goodput(topo, preset, frames, n) / 1e6})
    return rows


def bench_pipelining(quick: bool) -> list[dict]:
    torch.set_num_threads(1)  # leave the other core to the relay, sender and receiver
    model = HybridModel(get_preset("kimi-linear-mini"), device="cpu")
    rows = []
    with Topology(parse_link_spec({"bandwidth_mbit": 100, "delay_ms": 10}), backend="tun") as topo:
        for tokens in (4096,) if quick else (4096, 16384):
            piped, plain = exposed_time(topo, model, tokens, True), exposed_time(topo, model, tokens, False)
            goodput = plain["bytes"] / max(plain["exposed_s"], 1e-9)
            bound = max(0.0, plain["exposed_s"] - piped["prefill_s"]) + piped["largest_layer_bytes"] / goodput + 0.02
            rows.append({"tokens": tokens, "prefill_s": piped["prefill_s"], "exposed_pipelined_s": piped["exposed_s"],
                         "exposed_after_s": plain["exposed_s"], "target_s": bound, "kv_bytes": plain["bytes"]})
    return rows


def check(results: dict) -> list[str]:
    failures = []
    for row in results["vs_iperf3"]:
        if row["ratio"] is not None and row["ratio"] < 0.95:
            failures.append(f"{row['mbit']} Mbit/s: transfer/iperf3 {row['ratio']:.2f} < 0.95")
    conns = {r["connections"]: r["mbit"] for r in results["connections"]}
    if conns.get(8, 0) < 3 * conns.get(1, 1e9):
        failures.append(f"8 connections gave {conns.get(8, 0) / conns[1]:.1f}x one connection (< 3x)")
    for row in results["pipelining"]:
        if row["exposed_pipelined_s"] > row["target_s"]:
            failures.append(
                f"{row['tokens']} tokens: exposed {row['exposed_pipelined_s']:.3f} s > {row['target_s']:.3f} s")
    return failures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--check", action="store_true")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    if os.geteuid() != 0:
        print("bench/transport.py needs root (namespaces and the tun link)", file=sys.stderr)
        return 2
    results = {
        "bench": "transport", "cpus": os.cpu_count(),
        "git_sha": subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip(),
        "vs_iperf3": bench_vs_iperf(args.quick), "connections": bench_connections(args.quick),
        "pipelining": bench_pipelining(args.quick),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=1))
    for r in results["vs_iperf3"]:
        print(f"{r['mbit']:>5} Mbit/s {r['delay_ms']} ms, 4 conns: ours {r['ours_mbit']:.0f}, "
              f"iperf3 -P 4 {r['iperf3_mbit'] or 0:.0f} Mbit/s, ratio {r['ratio'] or 0:.3f}")
    base = results["connections"][0]["mbit"]
    print("40 ms RTT, 0.5% loss: " + ", ".join(
        f"{r['connections']} conn {r['mbit']:.0f} Mbit/s ({r['mbit'] / base:.1f}x)" for r in results["connections"]))
    for r in results["pipelining"]:
        print(f"{r['tokens']} tokens: prefill {r['prefill_s']:.2f} s, "
              f"exposed pipelined {r['exposed_pipelined_s']:.3f} s "
              f"(target <= {r['target_s']:.3f}), not pipelined {r['exposed_after_s']:.3f} s")
    print(f"results: {args.out}")
    failures = check(results)
    for failure in failures:
        print(f"MISSED: {failure}")
    return 1 if args.check and failures else 0


if __name__ == "__main__":
    sys.exit(main())
