"""What the live engine itself costs: per-request overhead, knob-to-effect latency, sustained rate.

Three questions, each on real worker processes, a real shaped link (the run's link backend) and an
embedded MQTT broker, with the `tiny` kimi-linear-mini preset:

(a) Overhead of a remote request. A run sends a few 2,048-token prompts (threshold 1,024, so each
    is prefilled remotely and its KV crosses a 200 Mbit/s, 5 ms link), spaced so each is alone in
    the system. The record's parts telescope: queue_s + prefill + exposed transfer + first decode
    step, as stamped at their boundaries, always add up to TTFT exactly, so they cannot show an
    overhead. Here the parts are what the components measure of their own work instead, and
    everything between them is overhead:

      compute   = PrefillDone.t_end - PrefillDone.t_start: the worker's layer-wise prefill on its
                  torch thread, serialising each layer for the sender (work a real system does);
      wire      = the least time the shaped link needs after the compute to deliver what is left:
                  max(t_first_send + all_bytes / rate, t_end + last_layer_bytes / rate) - t_end +
                  one-way delay (bytes as chunked on the wire; earlier layers stream during compute);
      first decode step = 0: the first token comes from the prefill's logits, the decode worker
                  only admits the request;
      overhead  = TTFT - compute - wire.

    It holds the gateway's dispatch (route, prompt synthesis, the 'arrived'/'routed' MQTT events,
    the control hop; the worker's FIFO is empty), the KV sender look-up and the hop to the torch
    thread, and after the compute: the link emulator's per-packet cost beyond the ideal wire time,
    rebuilding the cache on the decode worker, the Decode command's hop through the gateway and
    admission. Not overhead: queueing behind other requests (there is none), the model's compute,
    the link's rate and delay. The first request of each run is reported apart ("cold"): its
    worker opens its KV connections to the decode node on first use and runs torch's first
    forward. Target: overhead <= 5 % of TTFT or <= 20 ms (median of the warm requests).
    The bench wraps Gateway.on_message (observation only) to see the workers' own stamps
    (PrefillDone.t_start, TransferDone.t_start) that requests.parquet does not keep.

(b) Knob-to-effect latency. With a run going, publish prfaas/<run>/control/threshold
    {"v": 1, "tokens": N} and wait for the metrics snapshot the run publishes right after applying
    a knob, whose threshold_tokens (read from the router) equals N. Target: <= 200 ms (median).

(c) Sustained request rate. Short prompts (64-512 tokens, threshold 352: a third remote),
    2 output tokens, 1 remote prefill + 2 local prefill + 1 decode node; Poisson arrivals at
    increasing rates, one run per rate. A rate is sustained when every request completes, the
    completed rate (completions over first arrival to last finish) is >= 95 % of the offered rate
    (arrivals over first to last arrival) and TTFT P90 stays <= 0.5 s (unloaded it is ~30 ms).
    Reports the highest sustained rate (no target in the issue).

Writes bench/results/live_overhead.json. Needs root (namespaces, TUN).

    python bench/live_overhead.py [--quick] [--check] [--parts abc]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import aiomqtt  # noqa: E402
import pandas as pd  # noqa: E402

from emulator.live import gateway as gateway_module  # noqa: E402
from emulator.live.session import run_live  # noqa: E402
from emulator.net.names import new_run_id  # noqa: E402
from emulator.scenario import parse_scenario  # noqa: E402
from emulator.telemetry.broker import EmbeddedBroker, parse_broker_url  # noqa: E402
from emulator.telemetry.schemas import control_topic, topic  # noqa: E402
from emulator.transport.frames import HEADER_BYTES, split_layer  # noqa: E402
from emulator.wire import protocol as p  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results" / "live_overhead.json"
PRESET, SIZE = "kimi-linear-mini", "tiny"
OVERHEAD_TARGET_S, OVERHEAD_TARGET_FRACTION = 0.020, 0.05
KNOB_TARGET_S = 0.200
KEEP_UP_FRACTION, TTFT_P90_BOUND_S = 0.95, 0.5
PROMPT_TOKENS, THRESHOLD = 2048, 1024
LINK_MBIT, LINK_DELAY_MS = 200.0, 5.0


def scenario(name: str, **changes: Any):
    data: dict[str, Any] = {
        "name": name, "engine": "live", "seed": 1, "duration_s": 3.0,
        "model": {"preset": PRESET, "size": SIZE},
        "clusters": {"remote": {"instances": 1, "device": "cpu"},
                     "local": {"instances": 2, "device": "cpu", "prefill_instances": 1, "decode_max_batch": 8}},
        "link": {"bandwidth_mbit": LINK_MBIT, "delay_ms": LINK_DELAY_MS},
        "router": {"policy": "prfaas", "threshold_tokens": THRESHOLD},
        "scheduler": {"short_term": {"enabled": False}, "long_term": {"enabled": False}},
        "prefix_cache": {"block_tokens": 64, "capacity_mib": {"remote": 64, "local": 64}},
        "workload": {"arrival": {"kind": "poisson", "rate_per_s": 2.0},
                     "input_len": {"kind": "uniform", "min": 64, "max": 2048},
                     "output_len": {"kind": "fixed", "tokens": 4}},
    }
    data.update(changes)
    return parse_scenario(data, Path.cwd())


def q(values: list[float], quantile: float) -> float:
    return float(pd.Series(values).quantile(quantile)) if values else float("nan")


def spread(values: list[float]) -> dict[str, float]:
    return {"median": q(values, 0.5), "p10": q(values, 0.1), "p90": q(values, 0.9),
            "min": min(values, default=float("nan")), "max": max(values, default=float("nan")), "n": len(values)}


# ---- (a) overhead of a remote request ----

def layer_frames() -> list[tuple[int, int]]:
    """(frame bytes, bytes on the wire with chunk headers) of each layer of a PROMPT_TOKENS
    prefill, in the order the worker ships them; sizes depend on the shape only, so any prompt
    will do."""
    import torch

    from model_stub import HybridModel, get_preset
    from model_stub.serialize import encode_layer

    torch.set_num_threads(1)
    model = HybridModel(get_preset(PRESET, SIZE, seed=0), device="cpu")
    sizes: list[tuple[int, int]] = []

    def ship(index: int, layer) -> None:
        frame = encode_layer(index, layer, PROMPT_TOKENS)
        sizes.append((len(frame), sum(HEADER_BYTES + c.header.length for c in split_layer(0, index, 1, frame))))

    with torch.inference_mode():
        model.prefill([i % 200 for i in range(PROMPT_TOKENS)], on_layer_done=ship)
    return sizes


class MessageTap:
    """Every worker message the gateway handles, with the node that sent it (observation only)."""

    def __init__(self) -> None:
        self.messages: list[tuple[str, p.Message]] = []
        self._original = gateway_module.Gateway.on_message

    def __enter__(self) -> MessageTap:
        original, messages = self._original, self.messages

        async def on_message(gateway, node, msg):
            if not isinstance(msg, p.Stats):
                messages.append((node.name, msg))
            return await original(gateway, node, msg)

        gateway_module.Gateway.on_message = on_message
        return self

    def __exit__(self, *exc) -> None:
        gateway_module.Gateway.on_message = self._original


def overhead_run(index: int, warm_requests: int, frames: list[tuple[int, int]],
                 work_dir: Path) -> list[dict[str, Any]]:
    """One run: a cold request at 0.3 s, then `warm_requests` more 0.7 s apart."""
    times = [0.3 + 0.7 * i for i in range(warm_requests + 1)]
    sc = scenario(f"bench-overhead-{index}", duration_s=times[-1] + 0.5, seed=index,
                  workload={"arrival": {"kind": "poisson", "rate_per_s": 1e-6},
                            "input_len": {"kind": "fixed", "tokens": PROMPT_TOKENS},
                            "output_len": {"kind": "fixed", "tokens": 16}},
                  timeline=[{"at_s": t, "burst": {"requests": 1}} for t in times])
    out = work_dir / f"overhead-{index}"
    with MessageTap() as tap:
        doc = asyncio.run(run_live(sc, out, embedded_broker=True))
    records = pd.read_parquet(out / "requests.parquet").sort_values("arrival_s")
    by_rid: dict[int, dict[str, p.Message]] = {}
    for _, msg in tap.messages:
        by_rid.setdefault(getattr(msg, "rid", -1), {})[msg.op] = msg
    rate = LINK_MBIT * 1e6 / 8
    total, last = sum(w for _, w in frames), frames[-1][1]
    samples = []
    # wire ids go out in arrival order (no request here is retried: each is alone in the system)
    for order, rid in enumerate(sorted(r for r in by_rid if r > 0)):
        rec, msgs = records.iloc[order], by_rid[rid]
        started, done, sent, first = (msgs.get(k) for k in ("prefill_started", "prefill_done", "transfer_done",
                                                             "first_token"))
        if (rec["status"] != "completed" or rec["route"] != "prfaas" or None in (started, done, sent, first)
                or done.kv_bytes != sum(f for f, _ in frames)):
            samples.append({"run": index, "request": rec["id"], "cold": order == 0, "valid": False,
                            "why": f"status {rec['status']}, route {rec['route']}, messages {sorted(msgs)}, "
                                   f"kv_bytes {done.kv_bytes if done else None}"})
            continue
        t0 = started.t - rec["prefill_start_s"]  # the gateway's run start on the shared monotonic clock
        arrival = t0 + rec["arrival_s"]
        compute = done.t_end - done.t_start
        wire = max(sent.t_start + total / rate, done.t_end + last / rate) - done.t_end + LINK_DELAY_MS / 1e3
        ttft = first.t - arrival
        samples.append({
            "run": index, "request": rec["id"], "cold": order == 0, "valid": True, "ttft_s": ttft,
            "compute_s": compute, "wire_s": wire, "overhead_s": ttft - compute - wire,
            "dispatch_s": started.t - arrival, "sender_s": done.t_start - started.t,
            "tail_s": first.t - done.t_end, "kv_bytes": done.kv_bytes, "cached_len": done.cached_len,
            "record_ttft_s": float(rec["ttft_s"]),
        })
    samples.append({"run": index, "link_backend": doc["meta"]["link_backend"], "meta": True})
    return samples


def part_overhead(runs: int, warm_requests: int, work_dir: Path) -> dict[str, Any]:
    frames = layer_frames()
    samples: list[dict[str, Any]] = []
    for index in range(runs):
        samples += overhead_run(index, warm_requests, frames, work_dir)
    backend = next((s["link_backend"] for s in samples if s.get("meta")), None)
    samples = [s for s in samples if not s.get("meta")]
    valid = [s for s in samples if s["valid"]]
    summary: dict[str, Any] = {"link_backend": backend, "wire_bytes_per_layer": [w for _, w in frames],
                               "invalid": len(samples) - len(valid)}
    for label, group in (("warm", [s for s in valid if not s["cold"]]), ("cold", [s for s in valid if s["cold"]])):
        summary[label] = {key: spread([s[key] for s in group]) for key in
                          ("ttft_s", "compute_s", "wire_s", "overhead_s", "dispatch_s", "sender_s", "tail_s")}
        summary[label]["overhead_fraction"] = spread([s["overhead_s"] / s["ttft_s"] for s in group])
    warm = summary["warm"]
    med, frac = warm["overhead_s"]["median"], warm["overhead_fraction"]["median"]
    summary["target"] = f"<= {OVERHEAD_TARGET_FRACTION:.0%} of TTFT or <= {OVERHEAD_TARGET_S * 1e3:.0f} ms"
    summary["met"] = bool(med <= OVERHEAD_TARGET_S or frac <= OVERHEAD_TARGET_FRACTION)
    return {"samples": samples, "summary": summary}


# ---- (b) knob-to-effect latency ----

def loaded(rate: float) -> dict[str, Any]:
    """Short prompts, a third of them over the threshold (so each of the 3 prefill nodes gets about
    a third), 2 output tokens; 1 remote prefill, 2 local prefill and 1 decode node. One decode node
    on purpose: with two, their `completed` messages
    can reach the gateway out of stamp order, the TTFT window's add raises in the gateway's
    message handler and the gateway drops a healthy decode node for the rest of the run."""
    return {"clusters": {"remote": {"instances": 1, "device": "cpu"},
                         "local": {"instances": 3, "device": "cpu", "prefill_instances": 2, "decode_max_batch": 32}},
            "router": {"policy": "prfaas", "threshold_tokens": 352},
            "workload": {"arrival": {"kind": "poisson", "rate_per_s": rate},
                         "input_len": {"kind": "uniform", "min": 64, "max": 512},
                         "output_len": {"kind": "fixed", "tokens": 2}}}


KNOB_LOAD_PER_S = 10.0
LOADED = loaded(KNOB_LOAD_PER_S)  # (b) measures the knobs under the load of (c) at a rate it sustains


async def knob_probe(url: str, run_id: str, repeats: int, warmup: int, latencies: list[float],
                     notes: list[str]) -> None:
    address = parse_broker_url(url)
    snapshots: asyncio.Queue[tuple[float, dict]] = asyncio.Queue()
    async with aiomqtt.Client(address.host, address.port) as client:
        await client.subscribe(topic(run_id, "metrics"))

        async def read() -> None:
            async for message in client.messages:
                snapshots.put_nowait((time.monotonic(), json.loads(message.payload)))

        reader = asyncio.create_task(read())
        try:
            await asyncio.wait_for(snapshots.get(), 120)  # the run's loops are up
            for i in range(warmup + repeats):
                tokens = 200 + 7 * i  # around the prompts' lengths: routes keep changing
                while not snapshots.empty():
                    snapshots.get_nowait()
                sent = time.monotonic()
                await client.publish(control_topic(run_id, "threshold"), json.dumps({"v": 1, "tokens": tokens}))
                try:
                    while True:
                        seen, snap = await asyncio.wait_for(snapshots.get(), 5.0)
                        if snap.get("threshold_tokens") == tokens:
                            break
                except TimeoutError:
                    notes.append(f"threshold {tokens}: no snapshot showed it within 5 s")
                    continue
                if i >= warmup:
                    latencies.append(seen - sent)
                await asyncio.sleep(0.15)
        finally:
            reader.cancel()


def part_knob(repeats: int, warmup: int, work_dir: Path) -> dict[str, Any]:
    run_id, latencies, notes = new_run_id(), [], []
    sc = scenario("bench-knob", duration_s=3.0 + 0.35 * (repeats + warmup), **LOADED)
    broker = EmbeddedBroker().start()
    try:
        async def both() -> dict:
            probe = asyncio.create_task(knob_probe(broker.url, run_id, repeats, warmup, latencies, notes))
            try:
                return await run_live(sc, work_dir / "knob", broker_url=broker.url, run_id=run_id)
            finally:
                if not probe.done():
                    notes.append("the run ended before every knob change was measured")
                    probe.cancel()
                await asyncio.gather(probe, return_exceptions=True)

        doc = asyncio.run(both())
    finally:
        broker.stop()
    applied = [line for line in doc["meta"]["knob_changes"] if "control: threshold ->" in line]
    summary = {"latency_s": spread(latencies), "applied": len(applied), "notes": notes,
               "target_s": KNOB_TARGET_S,
               "met": bool(latencies) and q(latencies, 0.5) <= KNOB_TARGET_S and len(latencies) == repeats}
    return {"samples_s": latencies, "summary": summary}


# ---- (c) sustained request rate ----

def rate_step(rate: float, duration_s: float, work_dir: Path) -> dict[str, Any]:
    sc = scenario(f"bench-rate-{rate:g}", duration_s=duration_s, seed=3, **loaded(rate))
    out = work_dir / f"rate-{rate:g}"
    cpu0, kids0, wall0 = cpu_s(resource.RUSAGE_SELF), cpu_s(resource.RUSAGE_CHILDREN), time.monotonic()
    asyncio.run(run_live(sc, out, embedded_broker=True))
    cpu1, kids1, wall = cpu_s(resource.RUSAGE_SELF), cpu_s(resource.RUSAGE_CHILDREN), time.monotonic() - wall0
    r = pd.read_parquet(out / "requests.parquet")
    done = r[r["status"] == "completed"]
    first = r["arrival_s"].min()
    offered = len(r) / max(r["arrival_s"].max() - first, 1e-9)
    served = len(done) / max(done["finish_s"].max() - first, 1e-9) if len(done) else 0.0
    p90 = float(done["ttft_s"].quantile(0.9)) if len(done) else float("inf")
    kept_up = len(done) == len(r) and served >= KEEP_UP_FRACTION * offered and p90 <= TTFT_P90_BOUND_S
    return {"rate_per_s": rate, "requests": len(r), "completed": len(done), "offered_per_s": offered,
            "served_per_s": served, "served_fraction": served / offered, "ttft_p50_s": float(done["ttft_s"].median()),
            "ttft_p90_s": p90, "remote_fraction": float((r["route"] == "prfaas").mean()),
            "gateway_cpu_s": cpu1 - cpu0, "gateway_cpu_ms_per_request": (cpu1 - cpu0) * 1e3 / max(len(r), 1),
            "workers_broker_cpu_s": kids1 - kids0,
            "wall_s": wall, "kept_up": bool(kept_up)}


def cpu_s(who: int) -> float:
    """User + system CPU seconds of this process (the gateway) or of its reaped children (workers,
    broker, link relay)."""
    usage = resource.getrusage(who)
    return usage.ru_utime + usage.ru_stime


def part_rate(rates: list[float], duration_s: float, refine: int, work_dir: Path) -> dict[str, Any]:
    steps = []
    for rate in rates:
        steps.append(rate_step(rate, duration_s, work_dir))
        if not steps[-1]["kept_up"]:
            break
    for _ in range(refine):  # bisect once between the highest sustained and the lowest missed rate
        good = [s["rate_per_s"] for s in steps if s["kept_up"]]
        bad = [s["rate_per_s"] for s in steps if not s["kept_up"]]
        if not good or not bad:
            break
        steps.append(rate_step(float(round((max(good) + min(bad)) / 2)), duration_s, work_dir))
    good = [s for s in steps if s["kept_up"]]
    best = max(good, key=lambda s: s["rate_per_s"]) if good else None
    summary = {"sustained_rate_per_s": best["rate_per_s"] if best else None,
               "served_per_s_at_best": best["served_per_s"] if best else None,
               "lowest_missed_rate_per_s": min((s["rate_per_s"] for s in steps if not s["kept_up"]), default=None),
               "criteria": f"all complete, served >= {KEEP_UP_FRACTION:.0%} of offered, "
                           f"TTFT P90 <= {TTFT_P90_BOUND_S:g} s"}
    return {"samples": steps, "summary": summary}


# ---- report ----

def table(results: dict[str, Any]) -> list[str]:
    lines = []
    if "overhead" in results:
        s = results["overhead"]["summary"]
        for label in ("warm", "cold"):
            g = s[label]
            if not g["ttft_s"]["n"]:
                continue
            lines.append(
                f"(a) {label:<4} n={g['ttft_s']['n']:<3} TTFT {g['ttft_s']['median'] * 1e3:6.1f} ms = compute "
                f"{g['compute_s']['median'] * 1e3:5.1f} + wire {g['wire_s']['median'] * 1e3:4.1f} + overhead "
                f"{g['overhead_s']['median'] * 1e3:5.1f} ms ({g['overhead_fraction']['median']:.0%}; "
                f"p10-p90 {g['overhead_s']['p10'] * 1e3:.1f}-{g['overhead_s']['p90'] * 1e3:.1f})")
            lines.append(
                f"    {'':<4} overhead parts: dispatch {g['dispatch_s']['median'] * 1e3:.1f}, sender "
                f"{g['sender_s']['median'] * 1e3:.1f}, after compute {g['tail_s']['median'] * 1e3:.1f} ms "
                f"- wire {g['wire_s']['median'] * 1e3:.1f}" + ("" if label == "cold" else
                                                                 f"  [target {s['target']}: "
                                                                 f"{'met' if s['met'] else 'MISSED'}]"))
    if "knob" in results:
        s = results["knob"]["summary"]
        lat = s["latency_s"]
        lines.append(f"(b) knob -> effect n={lat['n']}: median {lat['median'] * 1e3:.1f} ms, p90 "
                     f"{lat['p90'] * 1e3:.1f}, max {lat['max'] * 1e3:.1f} ms [target <= "
                     f"{KNOB_TARGET_S * 1e3:.0f} ms: {'met' if s['met'] else 'MISSED'}]")
    if "rate" in results:
        steps = sorted(results["rate"]["samples"], key=lambda st: st["rate_per_s"])
        lines.append("(c) rate: served, TTFT P90 | " + ", ".join(
            f"{st['rate_per_s']:g}/s: {st['served_fraction']:.0%} {st['ttft_p90_s'] * 1e3:.0f} ms"
            f"{'' if st['kept_up'] else ' (x)'}" for st in steps))
        s = results["rate"]["summary"]
        best = [st for st in steps if st["rate_per_s"] == s["sustained_rate_per_s"]]
        cpu = f"; gateway CPU {best[0]['gateway_cpu_ms_per_request']:.1f} ms/request there" if best else ""
        lines.append(f"    sustained: {s['sustained_rate_per_s']} req/s ({s['criteria']}){cpu}")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="CI-sized: fewer runs, repeats and rates")
    parser.add_argument("--check", action="store_true", help="exit 1 if (a) or (b) misses its target")
    parser.add_argument("--parts", default="abc", help="which questions to run (default abc)")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    if os.geteuid() != 0:
        print("bench/live_overhead.py needs root: the live engine creates network namespaces and TUN devices")
        return 2
    config = {
        "preset": f"{PRESET} ({SIZE})", "quick": args.quick, "parts": args.parts,
        "overhead": {"runs": 2 if args.quick else 5, "warm_requests_per_run": 2 if args.quick else 4,
                     "prompt_tokens": PROMPT_TOKENS, "threshold": THRESHOLD,
                     "link": f"{LINK_MBIT:g} Mbit/s, {LINK_DELAY_MS:g} ms"},
        "knob": {"repeats": 6 if args.quick else 20, "warmup": 2},
        "rate": {"rates": [10.0, 30.0] if args.quick else [10.0, 20.0, 30.0, 40.0, 50.0, 60.0, 80.0],
                 "duration_s": 4.0 if args.quick else 8.0, "refine": 0 if args.quick else 1},
    }
    results: dict[str, Any] = {}
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="prf-bench-live-") as tmp:
        work_dir = Path(tmp)
        if "a" in args.parts:
            c = config["overhead"]
            results["overhead"] = part_overhead(c["runs"], c["warm_requests_per_run"], work_dir)
        if "b" in args.parts:
            c = config["knob"]
            results["knob"] = part_knob(c["repeats"], c["warmup"], work_dir)
        if "c" in args.parts:
            c = config["rate"]
            results["rate"] = part_rate(c["rates"], c["duration_s"], c["refine"], work_dir)
    import torch

    doc = {
        "bench": "live_overhead",
        "machine": {"cpus": os.cpu_count(), "kernel": platform.release(), "python": platform.python_version(),
                    "torch": torch.__version__, "worker_threads": 1},
        "git_sha": subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True,
                                  cwd=Path(__file__).resolve().parent).stdout.strip(),
        "config": config, "wall_s": time.monotonic() - started,
        **{name: part for name, part in results.items()},
        "summary": {name: part["summary"] for name, part in results.items()},
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=1, default=float))
    print(f"live engine overhead ({PRESET} {SIZE}, {os.cpu_count()} CPUs), {doc['wall_s']:.0f} s")
    for line in table(results):
        print(line)
    print(f"results: {args.out}")
    missed = [name for name in ("overhead", "knob") if name in results and not results[name]["summary"]["met"]]
    for name in missed:
        print(f"MISSED: {name} target")
    return 1 if args.check and missed else 0


if __name__ == "__main__":
    sys.exit(main())
