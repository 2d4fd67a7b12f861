"""`python -m model_stub bench`: prefill and decode speed, S_kv(l), Phi_kv(l) and roofline efficiency.

The roofline is a square GEMM on the same device and threads, timed before and after every prefill
run, so efficiency = (model matmul FLOPs / prefill seconds) / GEMM FLOP/s beside it is a same-moment
ratio; a length's figure is the median of those paired ratios (see roofline.py).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from model_stub.config import PRESET_NAMES, SIZES, LayerKind, get_preset
from model_stub.flops import prefill_flops
from model_stub.model import TORCH_DTYPES, HybridModel, resolve_device
from model_stub.roofline import GemmReference, PairedRun, interleave, summary, timed

DENSE = "dense-gqa-mini"
EFFICIENCY_TOKENS, EFFICIENCY_TARGET = 4096, 0.40  # issue 28: every hybrid preset, median paired ratio, CPU
GPU_EFFICIENCY_TOKENS, GPU_EFFICIENCY_TARGET = 16384, 0.40  # issue 18: every hybrid preset, on CUDA
CONTENDED_GEMM_SHARE = 0.75  # a pair whose GEMM ran below this share of the run's best shared its cores
SUPERLINEAR_TARGET = 1.25  # dense T(16K) / T(4K) must exceed 4 x this


@dataclass(frozen=True, slots=True)
class DeviceDefaults:
    """What a bench measures on a device kind unless told otherwise. On a GPU: the base size in
    bf16 at 4K/16K/64K and decode batches up to 32, against a bf16 GEMM large enough to reach the
    chip's rate; on a CPU: the small size in fp32."""

    size: str
    lengths: tuple[int, ...]
    decode_batches: tuple[int, ...]
    decode_context: int
    decode_steps: int
    gemm_n: int
    dtype: str


DEFAULTS = {
    "cpu": DeviceDefaults("small", (1024, 4096, 16384), (1, 8), 1024, 16, 2048, "float32"),
    "cuda": DeviceDefaults("base", (4096, 16384, 65536), (1, 8, 32), 4096, 32, 8192, "bfloat16"),
}
QUICK = {
    "cpu": DeviceDefaults("small", (1024, 4096), (1, 8), 256, 4, 1024, "float32"),
    "cuda": DeviceDefaults("base", (4096, 16384), (1, 8, 32), 1024, 8, 4096, "bfloat16"),
}


@dataclass(frozen=True, slots=True)
class BenchSettings:
    presets: tuple[str, ...]
    size: str
    lengths: tuple[int, ...]
    decode_batches: tuple[int, ...]
    decode_context: int
    decode_steps: int
    repeats: int
    device: str
    threads: int
    gemm_n: int
    dtype: str = "float32"  # the model's and the GEMM's


def measure_prefill(model: HybridModel, tokens: int, repeats: int, gemm: GemmReference) -> tuple[PairedRun, int]:
    """Prefills of `tokens` random byte tokens interleaved with GEMM samples, and the cache bytes."""
    gen = torch.Generator().manual_seed(tokens)
    ids = torch.randint(0, 256, (tokens,), generator=gen)
    model.prefill(ids[: min(tokens, 256)])  # warm-up
    cache_bytes = model.prefill(ids)[1].nbytes
    return interleave(lambda: model.prefill(ids), gemm, repeats), cache_bytes


def measure_decode(model: HybridModel, batch: int, context: int, steps: int) -> list[float]:
    """Milliseconds per decode step for `batch` requests each `context` tokens long."""
    ids = torch.randint(0, 256, (context,), generator=torch.Generator().manual_seed(context))
    _, cache = model.prefill(ids)
    caches = [type(cache)(cache.config, list(cache.layers), cache.num_tokens) for _ in range(batch)]
    tokens = [65] * batch
    model.decode_step(tokens, caches)  # warm-up
    return [1e3 * timed(lambda: model.decode_step(tokens, caches), model.device) for _ in range(steps)]


def bench_preset(name: str, s: BenchSettings, gemm: GemmReference) -> dict:
    config = get_preset(name, s.size, dtype=s.dtype)
    model = HybridModel(config, s.device)
    by_length = {}
    for tokens in s.lengths:
        paired, cache_bytes = measure_prefill(model, tokens, s.repeats, gemm)
        seconds = statistics.median(paired.model_s)
        flops = prefill_flops(config, tokens)
        ratios = paired.ratios(flops)
        by_length[str(tokens)] = {
            "prefill_s": summary(paired.model_s), "samples_s": paired.model_s, "tokens_per_s": tokens / seconds,
            "flops": flops, "gflops_per_s": flops / seconds / 1e9,
            "efficiency": statistics.median(ratios), "efficiency_paired": summary(ratios), "ratios": ratios,
            "gemm_gflops_samples": paired.gemm_gflops,
            "s_kv_bytes": cache_bytes, "s_kv_bytes_model": config.cache_bytes(tokens),
            "phi_kv_mbit_s": cache_bytes * 8 / seconds / 1e6,
        }
    decode = {str(b): summary(measure_decode(model, b, s.decode_context, s.decode_steps)) for b in s.decode_batches}
    del model
    if torch.cuda.is_available():
        torch.cuda.empty_cache()  # the next preset's weights and caches get the memory back
    return {
        "pattern": config.pattern, "kv_bytes_per_token": config.kv_bytes_per_token(),
        "full_layers": sum(k.is_growing for k in config.layer_kinds), "prefill": by_length,
        "decode_ms_per_step": decode,
        "decode_tokens_per_s": {b: int(b) * 1e3 / row["median"] for b, row in decode.items()},
    }


def _machine(device: torch.device) -> dict:
    try:
        sha = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5).stdout.strip()
    except OSError:
        sha = ""
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor() or platform.machine()
    return {
        "device": str(device), "device_name": name, "cpu_count": os.cpu_count(),
        "threads": torch.get_num_threads(), "torch": torch.__version__, "python": platform.python_version(),
        "git_sha": sha,
    }


def run(s: BenchSettings, progress: Callable[[str], None] = lambda _: None) -> dict:
    device = resolve_device(s.device)
    if device.type == "cpu":
        torch.set_num_threads(s.threads)
    progress(f"gemm {s.gemm_n}^3 {s.dtype} on {device}, timed beside every prefill run")
    gemm = GemmReference(device, s.gemm_n, TORCH_DTYPES[s.dtype])
    presets = {}
    for name in s.presets:
        progress(f"{name} ({s.size})")
        presets[name] = bench_preset(name, s, gemm)
    samples = [g for p in presets.values() for row in p["prefill"].values() for g in row["gemm_gflops_samples"]]
    result = {
        "bench": "model_stub", "machine": _machine(device), "settings": asdict(s),
        "gemm_gflops": summary(samples), "gemm_samples": samples, "presets": presets,
    }
    result["summary"] = summarize(result)
    result["contended_pairs"] = contended_pairs(result)
    return result


def summarize(result: dict) -> dict:
    """The figures the issue asks for, derived from the raw results."""
    presets, lengths = result["presets"], [int(n) for n in result["settings"]["lengths"]]
    longest = str(max(lengths))
    out: dict = {}
    if DENSE in presets:
        dense_kv = presets[DENSE]["prefill"][longest]["s_kv_bytes"]
        out[f"s_kv_ratio_vs_dense_at_{longest}"] = {
            n: p["prefill"][longest]["s_kv_bytes"] / dense_kv for n, p in presets.items()
        }
        if {4096, 16384} <= set(lengths):
            t = presets[DENSE]["prefill"]
            out["dense_prefill_growth_4k_to_16k"] = t["16384"]["prefill_s"]["median"] / t["4096"]["prefill_s"]["median"]
    if not result["machine"]["device"].startswith("cuda") and EFFICIENCY_TOKENS in lengths:
        out["hybrid_efficiency_at_4k"] = {n: p["prefill"][str(EFFICIENCY_TOKENS)]["efficiency"]
                                          for n, p in presets.items() if n != DENSE}
    if result["machine"]["device"].startswith("cuda") and GPU_EFFICIENCY_TOKENS in lengths:
        out["hybrid_efficiency_at_16k"] = {n: p["prefill"][str(GPU_EFFICIENCY_TOKENS)]["efficiency"]
                                           for n, p in presets.items() if n != DENSE}
    return out


def contended_pairs(result: dict) -> list[str]:
    """Prefill runs whose neighbouring GEMM samples fell below CONTENDED_GEMM_SHARE of the run's best.

    Pairing cancels a uniform slowdown, but not oversubscription: with another process on one of two
    cores the GEMM halves while a model of many small ops can slow 10-50x (issue 28), so such pairs
    are named for the reader rather than silently averaged in.
    """
    best = max(result["gemm_samples"])
    out = []
    for name, p in result["presets"].items():
        for tokens, row in p["prefill"].items():
            gemm = row["gemm_gflops_samples"]
            slow = sum((gemm[i] + gemm[i + 1]) / 2 < CONTENDED_GEMM_SHARE * best for i in range(len(gemm) - 1))
            if slow:
                out.append(f"{name}@{tokens}: {slow}/{len(gemm) - 1}")
    return out


def check(result: dict) -> list[str]:
    """Targets from the [Foundation] issue and issue 28 that this run missed (empty when all hold)."""
    failures, figures = [], result["summary"]
    for name, eff in figures.get("hybrid_efficiency_at_4k", {}).items():
        if eff < EFFICIENCY_TARGET:
            failures.append(f"{name} prefill at 4K: median paired efficiency {eff:.0%} < {EFFICIENCY_TARGET:.0%}")
    for name, eff in figures.get("hybrid_efficiency_at_16k", {}).items():
        if eff < GPU_EFFICIENCY_TARGET:
            failures.append(f"{name} prefill at 16K on CUDA: efficiency {eff:.0%} < {GPU_EFFICIENCY_TARGET:.0%}")
    growth = figures.get("dense_prefill_growth_4k_to_16k")
    if growth is not None and growth < 4 * SUPERLINEAR_TARGET:
        failures.append(
            f"{DENSE} prefill 4K->16K grew {growth:.2f}x, not clearly super-linear (> {4 * SUPERLINEAR_TARGET})")
    for name, p in result["presets"].items():
        config = get_preset(name, result["settings"]["size"], dtype=result["settings"].get("dtype", "float32"))
        growing_per_token = sum(config.growing_bytes_per_token(k) for k in config.layer_kinds if k.is_growing)
        for n, row in p["prefill"].items():
            if row["s_kv_bytes"] != row["s_kv_bytes_model"]:
                failures.append(f"{name} at {n}: measured S_kv {row['s_kv_bytes']} != model {row['s_kv_bytes_model']}")
        lens = sorted(int(n) for n in p["prefill"])
        bounded_by_then = lens[0] >= config.window or LayerKind.SWA not in config.layer_kinds
        if len(lens) >= 2 and bounded_by_then:
            grew = p["prefill"][str(lens[-1])]["s_kv_bytes"] - p["prefill"][str(lens[0])]["s_kv_bytes"]
            if grew != (lens[-1] - lens[0]) * growing_per_token:
                failures.append(f"{name}: S_kv grew {grew} bytes, not only through its full layers")
    return failures


def _efficiency_cell(row: dict) -> str:
    paired = row["efficiency_paired"]
    return f"{100 * paired['median']:.0f} ({100 * paired['min']:.0f}-{100 * paired['max']:.0f})"


def format_table(result: dict) -> str:
    lengths = result["settings"]["lengths"]
    pick = [str(n) for n in lengths if n in (4096, 16384)] or [str(n) for n in lengths[-2:]]
    head = f"{'preset':<20}" + "".join(f"{'tok/s@' + n:>12}{'eff% (min-max)@' + n:>21}" for n in pick)
    head += f"{'dec ms b1/b8':>14}{'S_kv MiB@' + pick[-1]:>15}{'Phi Mbit/s':>11}"
    dtype = result["settings"].get("dtype", "float32")
    lines = [f"gemm {result['gemm_gflops']['median']:.1f} GFLOP/s {dtype} on {result['machine']['device']}", head]
    for name, p in result["presets"].items():
        row = f"{name:<20}" + "".join(
            f"{p['prefill'][n]['tokens_per_s']:>12.0f}{_efficiency_cell(p['prefill'][n]):>21}" for n in pick
        )
        dec = "/".join(f"{p['decode_ms_per_step'][b]['median']:.1f}" for b in p["decode_ms_per_step"])
        last = p["prefill"][pick[-1]]
        row += f"{dec:>14}{last['s_kv_bytes'] / 2**20:>15.2f}{last['phi_kv_mbit_s']:>11.0f}"
        lines.append(row)
    for key, value in result["summary"].items():
        text = ", ".join(f"{k} {v:.3f}" for k, v in value.items()) if isinstance(value, dict) else f"{value:.3f}"
        lines.append(f"{key}: {text}")
    return "\n".join(lines[:10])


def _ints(text: str) -> tuple[int, ...]:
    try:
        values = tuple(int(v) for v in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of integers") from None
    if any(v <= 0 for v in values):
        raise argparse.ArgumentTypeError(f"{text!r}: every value must be positive")
    return values


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m model_stub bench", description=__doc__)
    parser.add_argument("--presets", default=",".join(PRESET_NAMES), help="comma-separated preset names")
    parser.add_argument("--size", default=None, choices=SIZES, help="default: small on CPU, base on CUDA")
    parser.add_argument("--lengths", type=_ints, default=None,
                        help="prefill lengths, e.g. 1024,4096 (default: 1K/4K/16K on CPU, 4K/16K/64K on CUDA)")
    parser.add_argument("--dtype", default="auto", choices=("auto", *TORCH_DTYPES),
                        help="model and GEMM precision (auto: bfloat16 on CUDA, float32 on CPU)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--device", default="auto")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--quick", action="store_true",
                        help="CI-sized: two lengths, shorter decode and a smaller GEMM (--repeats still applies)")
    parser.add_argument("--gemm-n", type=int, default=None,
                        help="side of the roofline GEMM (default: 2048 on CPU, 8192 on CUDA; 1024/4096 quick)")
    parser.add_argument("--check", action="store_true", help="exit 1 when an issue target is missed")
    parser.add_argument("--out", type=Path, default=None,
                        help="JSON path (default bench/results/model_stub_<device>.json)")
    args = parser.parse_args(argv)
    presets = tuple(p for p in args.presets.split(",") if p)
    unknown = [p for p in presets if p not in PRESET_NAMES]
    if unknown or args.repeats < 1 or args.threads < 1 or not 16 <= (args.gemm_n or 16) <= 32768:
        print(f"bench: unknown presets {unknown}, non-positive --repeats/--threads or --gemm-n outside 16..32768",
              file=sys.stderr)
        return 2
    try:
        kind = resolve_device(args.device).type
    except RuntimeError as err:
        print(f"bench: --device {args.device!r}: {err}", file=sys.stderr)
        return 2
    if kind == "cuda" and not torch.cuda.is_available():
        print("bench: --device cuda but no CUDA device is visible; use cpu or auto", file=sys.stderr)
        return 2
    base = (QUICK if args.quick else DEFAULTS).get(kind, DEFAULTS["cpu"])
    settings = BenchSettings(
        presets=presets, size=args.size or base.size, lengths=args.lengths or base.lengths,
        decode_batches=base.decode_batches, decode_context=base.decode_context, decode_steps=base.decode_steps,
        repeats=args.repeats, device=args.device, threads=args.threads,
        gemm_n=args.gemm_n or base.gemm_n, dtype=base.dtype if args.dtype == "auto" else args.dtype,
    )
    result = run(settings, progress=lambda msg: print(f"[bench] {msg}", file=sys.stderr, flush=True))
    out = args.out or Path("bench/results") / f"model_stub_{result['machine']['device'].split(':')[0]}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2))
    print(format_table(result))
    print(f"results: {out}")
    if result["contended_pairs"]:
        print(f"NOTE: pairs beside a GEMM < {CONTENDED_GEMM_SHARE:.0%} of the run's best (cores shared; "
              f"re-measure on a quiet machine): {', '.join(result['contended_pairs'])}")
    failures = check(result)
    for failure in failures:
        print(f"MISSED: {failure}")
    return 1 if args.check and failures else 0
