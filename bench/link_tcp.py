"""Live KV transfers on the tun link against the virtual link's TCP model (emulator/virtual/tcp.py).

One Topology (tun backend), reshaped over a grid: 10/50/200 Mbit/s at 10 ms one way, and 200 Mbit/s
at 20 ms one way with 0, 0.5 and 1 % loss. Per point, KV caches of 1, 4 and 16 MB go through the
project's own KVSender/receiver (bench/transport.py's KVPair, 4 cubic connections): the first
transfer on new connections, back-to-back ones, and ones after a 1 s idle gap. Lossless points at
20/50/200 Mbit/s also start a 1 MB transfer (a second sender) a quarter into a 16 MB one. Each
measured time is set beside what FluidLink predicts for the same history (same sizes, same gaps,
same start offsets). Pipelined rows (bench/pipelined_kv.py), at the 40 ms RTT points: caches sent
layer by layer as produced, synthetic and by a real prefill, beside the fluid, the loss constant
and the spread that fit them: on a lossy link app-limited bursts recover from loss far slower than a cache
written at once; there the prefill rows go again IDLE_GAP_S apart, a worker's pace in the fidelity
matrix, after which Linux has shrunk the idle window (pipelined_kv.py). Writes
bench/results/link_tcp.json and prints a table. Needs root.

    python bench/link_tcp.py [--quick] [--pipelined]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from emulator.net.spec import parse_link_spec  # noqa: E402
from emulator.net.topology import Topology  # noqa: E402
from emulator.virtual.link import LinkState  # noqa: E402
from emulator.virtual.link_replay import arrival_times  # noqa: E402
from emulator.virtual.loops import link_states  # noqa: E402

from pipelined_kv import (  # noqa: E402
    IDLE_GAP_S,
    PRESET,
    SYNTHETIC_MB,
    fit_loss_c,
    fit_loss_spread,
    prefill_row,
    synthetic_row,
)
from transport import ROOT, KVPair  # noqa: E402  (bench/, first on a script's path)

RESULTS = Path(__file__).resolve().parent / "results" / "link_tcp.json"
IDLE_S = 1.0  # > any RTO here: Linux would restart slow start after it unless told not to
FULL = dict(points=[dict(bandwidth_mbit=200, delay_ms=20), dict(bandwidth_mbit=10, delay_ms=10),
                    dict(bandwidth_mbit=50, delay_ms=10), dict(bandwidth_mbit=200, delay_ms=10),
                    dict(bandwidth_mbit=200, delay_ms=20, loss_pct=0.5),
                    dict(bandwidth_mbit=200, delay_ms=20, loss_pct=1.0)],
            sizes=(1, 4, 16), repeats=2, contention=(20, 50, 200), pipelined_repeats=12)
QUICK = dict(points=[dict(bandwidth_mbit=200, delay_ms=20), dict(bandwidth_mbit=200, delay_ms=20, loss_pct=1.0)],
             sizes=(1, 4), repeats=1, contention=(50,), pipelined_repeats=3)


def state_of(point: dict) -> LinkState:
    return link_states(parse_link_spec(point), 4)[0]


def predict(state: LinkState, sizes_and_starts: list[tuple[float, float]]) -> list[float]:
    """Seconds from start to arrival of each (bytes, start_s) transfer on one fresh FluidLink."""
    starts = [(at, size) for size, at in sizes_and_starts]
    return [arrived - at for arrived, (at, _) in zip(arrival_times(state, starts), starts, strict=True)]


def timed(pair: KVPair, request_id: int) -> tuple[float, float]:
    """(start_s, ready_s) of one whole transfer: first send, and when the receiver held the cache."""
    pair.sender.write({"request_id": request_id})
    ready = pair.receiver.read()["ready_s"]
    return pair.sender.read()["start_s"], ready


def series(pair: KVPair, first_id: int, repeats: int) -> list[dict]:
    """The first transfer, `repeats` back to back, then `repeats` each after IDLE_S; with the gaps."""
    rows, last_ready = [], None
    modes = ["first"] + ["back_to_back"] * repeats + ["after_idle"] * repeats
    for k, mode in enumerate(modes):
        if mode == "after_idle":
            time.sleep(IDLE_S)
        start, ready = timed(pair, first_id + k)
        rows.append({"mode": mode, "s": ready - start, "gap_s": None if last_ready is None else start - last_ready})
        last_ready = ready
    return rows


def model_series(state: LinkState, size: float, rows: list[dict], is_new: bool) -> None:
    """Each row's prediction with its history: the same transfers, the measured gaps between them."""
    starts, t = [], 0.0
    for row in rows:
        t += row["gap_s"] or 0.0
        starts.append((size, t))
        t += row["s"]  # the next starts a measured gap after this one's measured arrival
    history = predict(state, starts)
    for row, model_s in zip(rows, history, strict=True):
        row["model_s"] = model_s
    if not is_new:  # connections already open from an earlier point: the ramp is behind them
        warm = predict(state, [(size, 0.0)] + [(size, 10.0 + i * 30.0) for i in range(len(rows))])
        rows[0]["model_s"] = warm[1]


def contention(topo: Topology, big: KVPair, small: KVPair, mbit: float, first_id: int) -> dict:
    topo.update(parse_link_spec({"bandwidth_mbit": mbit, "delay_ms": 10}))
    time.sleep(1)
    timed(big, first_id), timed(small, first_id)
    big.sender.write({"request_id": first_id + 1})
    time.sleep(big.bytes * 8 / (mbit * 1e6) / 4)
    small.sender.write({"request_id": first_id + 1})
    small_ready, small_start = small.receiver.read()["ready_s"], small.sender.read()["start_s"]
    big_ready, big_start = big.receiver.read()["ready_s"], big.sender.read()["start_s"]
    offset = small_start - big_start
    model = predict(state_of({"bandwidth_mbit": mbit, "delay_ms": 10}), [(big.bytes, 0.0), (small.bytes, offset)])
    model_fair = predict(state_of({"bandwidth_mbit": mbit, "delay_ms": 10, "queue_packets": 1}),
                         [(big.bytes, 0.0), (small.bytes, offset)])
    return {"mbit": mbit, "offset_s": offset, "big_s": big_ready - big_start, "small_s": small_ready - small_start,
            "model_big_s": model[0], "model_small_s": model[1], "fair_small_s": model_fair[1]}


def run(grid: dict, pipelined_only: bool = False) -> dict:
    points, pairs, piped = [], {}, []
    with Topology(parse_link_spec(grid["points"][0]), backend="tun") as topo:
        try:
            for mb in () if pipelined_only else grid["sizes"]:
                pairs[mb] = KVPair(topo, ROOT, mb, 4)
            pairs[SYNTHETIC_MB] = piped_pair = KVPair(topo, ROOT, SYNTHETIC_MB, 4, PRESET)
            request_id = 1
            for n, point in enumerate(grid["points"]):
                topo.update(parse_link_spec(point))
                time.sleep(1)
                if point["delay_ms"] == 20:
                    repeats = grid["pipelined_repeats"]
                    piped.append(synthetic_row(piped_pair, state_of(point), point, 50_000 + 100 * n, repeats))
                    piped.append(prefill_row(topo, state_of(point), point, repeats))
                    if point.get("loss_pct"):
                        piped.append(prefill_row(topo, state_of(point), point, repeats, IDLE_GAP_S))
                if pipelined_only:
                    continue
                for mb, pair in pairs.items():
                    if pair is piped_pair:
                        continue
                    if mb * 8 / point["bandwidth_mbit"] > 4:
                        continue  # 16 MB at 10 Mbit/s: 13 s a transfer, the slow start long gone
                    rows = series(pair, request_id, grid["repeats"])
                    request_id += 100
                    model_series(state_of(point), pair.bytes, rows, is_new=n == 0)
                    points.append({**point, "megabytes": mb, "bytes": pair.bytes, "rows": rows})
            whole = {mb: pair for mb, pair in pairs.items() if pair is not piped_pair}
            shared = [contention(topo, whole[max(whole)], whole[min(whole)], mbit, 10_000 + 10 * i)
                      for i, mbit in enumerate(grid["contention"])] if len(whole) > 1 else []
        finally:
            for pair in pairs.values():
                pair.close()
    return {"points": points, "contention": shared, "pipelined": piped}


def summarize(results: dict) -> dict:
    errors = [row["model_s"] / row["s"] - 1 for p in results["points"] for row in p["rows"]]
    small = [c["model_small_s"] / c["small_s"] - 1 for c in results["contention"]]
    return {"median_abs_error": statistics.median(map(abs, errors)) if errors else None,
            "max_abs_error": max(map(abs, errors)) if errors else None, "contention_small_errors": small,
            "pipelined_errors": [p["model_s"] / p["mean_s"] - 1 for p in results["pipelined"]],
            "pipelined_loss_c_fit": fit_loss_c([p for p in results["pipelined"] if p["kind"] == "prefill"], state_of),
            "pipelined_loss_spread_fit": fit_loss_spread(results["pipelined"]),
            "synthetic_loss_c_fit": fit_loss_c([p for p in results["pipelined"] if p["kind"] == "synthetic"], state_of)}


def print_table(results: dict) -> None:
    """One line per link point: measured/model seconds per size (median over modes after the first)."""
    by_point: dict[str, list[str]] = {}
    for p in results["points"]:
        key = f"{p['bandwidth_mbit']:>3} Mbit/s {p['delay_ms']:>2} ms {p.get('loss_pct', 0):.1f}%"
        rest = [r for r in p["rows"] if r["mode"] != "first"]
        live, model = statistics.median(r["s"] for r in rest), statistics.median(r["model_s"] for r in rest)
        first = p["rows"][0]
        by_point.setdefault(key, []).append(f"{p['megabytes']}MB {live:.3f}/{model:.3f} ({model / live - 1:+.0%}; "
                                            f"first {first['s']:.3f}/{first['model_s']:.3f})")
    for key, cells in by_point.items():
        print(f"{key}: " + ", ".join(cells))
    for p in results["pipelined"]:
        gap = f"{p['gap_s']:g} s apart, " if "gap_s" in p else ""
        print(f"{p['bandwidth_mbit']:>3} Mbit/s {p['delay_ms']:>2} ms {p.get('loss_pct', 0):.1f}%: {p['kind']} {gap}"
              f"{p['bytes'] / 1e6:.2f} MB over {p['produce_s']:.2f} s, pipelined mean {p['mean_s']:.3f}/{p['model_s']:.3f} s "
              f"({p['model_s'] / p['mean_s'] - 1:+.0%}; measured {min(p['s']):.3f}-{max(p['s']):.3f})")
    for c in results["contention"]:
        print(f"{c['mbit']:>3} Mbit/s 1 MB {c['offset_s']:.2f} s into 16 MB: {c['small_s']:.2f}/{c['model_small_s']:.2f} "
              f"s (fair share {c['fair_small_s']:.2f}); 16 MB {c['big_s']:.2f}/{c['model_big_s']:.2f} s")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--pipelined", action="store_true", help="the pipelined rows alone")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    if os.geteuid() != 0:
        print("bench/link_tcp.py needs root (namespaces and the tun link)", file=sys.stderr)
        return 2
    grid = QUICK if args.quick else FULL
    sha = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    results = {"bench": "link_tcp", "cpus": os.cpu_count(), "git_sha": sha, "quick": args.quick,
               "load_before": os.getloadavg(), **run(grid, args.pipelined)}
    results["load_after"] = os.getloadavg()
    results["summary"] = summarize(results)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=1))
    print_table(results)
    s = results["summary"]
    whole = (f"median |error| {s['median_abs_error']:.1%}, max {s['max_abs_error']:.1%}"
             if s["median_abs_error"] is not None else "pipelined rows only")
    if s["pipelined_loss_c_fit"] is not None:
        whole += (f"; the prefill rows fit LOSS_C {s['pipelined_loss_c_fit']:g} "
                  f"(the synthetic ones {s['synthetic_loss_c_fit']:g})")
    if s["pipelined_loss_spread_fit"] is not None:
        whole += f", LOSS_SPREAD {s['pipelined_loss_spread_fit']:.2f}"
    print(f"model vs live: {whole}; "
          f"load {results['load_before'][0]:.1f} -> {results['load_after'][0]:.1f}; results: {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
