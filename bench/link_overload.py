"""Caches offered faster than the link carries them, on the tun link, beside the fluid's prediction
(emulator/virtual/overflow.py: loss recovery behind a full drop-tail buffer).

One KVSender (4 cubic connections, kept open) sends synthetic kimi-linear-mini caches (3.1 MB
whole, all 8 frames at once) at Poisson times to a receiver across a 10 Mbit/s, 10 ms link with
the tun backend's 1,000-packet queue (7.2 s): offered at 15 and 11 Mbit/s for OFFER_S seconds.
Each cache's seconds from offered to whole at the receiver are set beside what FluidLink says for
the same offers (one sender), and the connections' windows and retransmissions are sampled each
second: the windows' growth per second over the link's rate, until they first back off, is what
overflow.WINDOW_GROWTH takes. Writes bench/results/link_overload.json and prints a table. Needs root.

    python bench/link_overload.py [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from emulator.net.spec import parse_link_spec  # noqa: E402
from emulator.net.topology import LOCAL, REMOTE, Topology  # noqa: E402
from emulator.transport.sender import KVSender  # noqa: E402
from emulator.transport.tcp_info import TcpInfoError, read_tcp_info  # noqa: E402
from emulator.virtual.core import Simulator  # noqa: E402
from emulator.virtual.link import FluidLink, LinkState  # noqa: E402
from emulator.wire.auth import KvHelloProof  # noqa: E402

from kv_peer import synthetic_frames  # noqa: E402
from link_tcp import state_of  # noqa: E402
from transport import ROOT, SECRET, start_receiver  # noqa: E402

POINT = {"bandwidth_mbit": 10, "delay_ms": 10}
PRESET, CACHE_MB = "kimi-linear-mini", 2.5  # the fidelity matrix's caches
OFFERED_MBIT = (15.0, 11.0)  # well past the link, and just past it
OFFER_S, QUICK_OFFER_S = 60.0, 30.0
SEED = 3


def offer_times(rate_per_s: float, offer_s: float, seed: int = SEED) -> list[float]:
    """Poisson offer times within `offer_s`."""
    rng, t, times = random.Random(seed), 0.0, []
    while True:
        t += rng.expovariate(rate_per_s)
        if t > offer_s:
            return times
        times.append(t)


def fluid_seconds(state: LinkState, offers: list[float], num_bytes: int) -> list[float]:
    """What the fluid link says each cache takes, offered at `offers` from one sender."""
    sim = Simulator()
    link = FluidLink(sim, state)
    done: dict[int, float] = {}
    for i, at_s in enumerate(offers):
        sim.schedule(at_s, lambda k: link.start(num_bytes, lambda j: done.__setitem__(j, sim.now), k, sender=0), i)
    sim.run()
    return [done[i] - at_s for i, at_s in enumerate(offers)]


def window_growth(samples: list[dict], rate_bytes_per_s: float, mss_bytes: int) -> float | None:
    """The windows' growth per second over the link's rate, from the first sample to the last one
    before their sum first falls (cubic backs off at a loss); None with fewer than three."""
    clean = samples[:1]
    for sample in samples[1:]:
        if sample["cwnd"] < clean[-1]["cwnd"]:
            break
        clean.append(sample)
    if len(clean) < 3:
        return None
    first, last = clean[0], clean[-1]
    return (last["cwnd"] - first["cwnd"]) * mss_bytes / (last["t_s"] - first["t_s"]) / rate_bytes_per_s


def run_row(topo: Topology, offered_mbit: float, offer_s: float) -> dict:
    _, frames = synthetic_frames(CACHE_MB, PRESET)
    num_bytes, n = sum(len(f) for f in frames), len(frames)
    offers = offer_times(offered_mbit * 1e6 / 8 / num_bytes, offer_s)
    receiver, port = start_receiver(topo, ROOT, PRESET)
    ready: dict[int, float] = {}
    samples: list[dict] = []
    mss = 0

    async def body() -> None:
        nonlocal mss
        sender = KVSender(lambda: topo.socket(REMOTE), topo.target(LOCAL, port), proof=KvHelloProof(SECRET),
                          sender_id="remote-prefill-0", num_connections=4)
        await sender.start()
        loop, t0 = asyncio.get_running_loop(), time.monotonic()

        async def offer() -> None:
            for k, at_s in enumerate(offers):
                await asyncio.sleep(max(0.0, t0 + at_s - time.monotonic()))
                for i, frame in enumerate(frames):
                    sender.send_layer(k + 1, i, n, frame)

        async def collect() -> None:
            for _ in offers:
                line = await loop.run_in_executor(None, receiver.read)
                ready[line["request_id"] - 1] = line["ready_s"] - t0

        async def sample() -> None:
            nonlocal mss
            while True:
                await asyncio.sleep(1.0)
                try:
                    infos = [read_tcp_info(sock) for sock in sender.sockets]
                except (OSError, TcpInfoError):
                    continue
                if infos:
                    mss = infos[0].snd_mss or mss
                    samples.append({"t_s": time.monotonic() - t0, "cwnd": sum(i.snd_cwnd or 0 for i in infos),
                                    "retrans": sum(i.total_retrans or 0 for i in infos),
                                    "rtt_ms": statistics.fmean((i.rtt_us or 0) / 1000 for i in infos)})

        sampler = asyncio.create_task(sample())
        try:
            await asyncio.gather(offer(), collect())
        finally:
            sampler.cancel()
            await sender.close()

    try:
        asyncio.run(body())
    finally:
        receiver.close()
    state = state_of(POINT)
    live = [ready[k] - at_s for k, at_s in enumerate(offers)]
    model = fluid_seconds(state, offers, num_bytes)
    return {**POINT, "offered_mbit": offered_mbit, "bytes": num_bytes, "offers_s": offers, "s": live,
            "model_s": model, "mean_s": statistics.fmean(live), "model_mean_s": statistics.fmean(model),
            "error": statistics.fmean(model) / statistics.fmean(live) - 1, "samples": samples,
            "window_growth": window_growth(samples, state.rate_bytes_per_s, mss or 8948)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help=f"one row, {QUICK_OFFER_S:g} s of offers")
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "link_overload.json")
    args = parser.parse_args()
    if os.geteuid() != 0:
        print("bench/link_overload.py needs root (namespaces and the tun link)", file=sys.stderr)
        return 2
    offered = OFFERED_MBIT[:1] if args.quick else OFFERED_MBIT
    load_before = os.getloadavg()
    with Topology(parse_link_spec(POINT), backend="tun") as topo:
        rows = [run_row(topo, mbit, QUICK_OFFER_S if args.quick else OFFER_S) for mbit in offered]
    results = {"bench": "link_overload", "cpus": os.cpu_count(), "quick": args.quick,
               "load_before": load_before, "load_after": os.getloadavg(), "rows": rows}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=1))
    for row in rows:
        growth = row["window_growth"]
        print(f"offered {row['offered_mbit']:g} Mbit/s on {row['bandwidth_mbit']}: {len(row['s'])} caches, "
              f"live mean {row['mean_s']:.2f} s, fluid {row['model_mean_s']:.2f} ({row['error']:+.1%}); "
              f"retransmitted {row['samples'][-1]['retrans'] if row['samples'] else 0} segments; window growth "
              f"{'n/a' if growth is None else f'{growth:.2f}'} of the rate per second")
    print(f"load {load_before[0]:.1f} -> {results['load_after'][0]:.1f}; results: {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
