"""The GPU path in one run of at most 5 minutes, for the few minutes a GPU machine is lent (issue 18).

Steps, each with its own time limit so the whole stays under MAX_TOTAL_S:
1. tests: the `gpu`-marked tests (on a machine without CUDA they collect and skip with the reason);
2. the model bench (`python -m model_stub bench --device D`): the GEMM rate in the model's precision,
   prefill efficiency against it, decode tokens/s;
3. copy/compute overlap: one prefill of kimi-linear-mini shipping every finished layer through the
   worker's staging path (`emulator.worker.kv_shipping`), in process, frames dropped;
4. `live-quickstart` on the live engine with its workers on the device (the remote worker pinned to
   GPU 0, the local ones too when there are GPUs for them);
5. where the kernel has sch_netem: the `netem`-marked tests and the netem row of
   `bench/link_fidelity.py --quick` (the default link backend of most Linux users).
Prints one table and writes JSON (bench/results/gpu_check.json unless --out). `--device cpu` runs
the same steps anywhere; CI runs `--device cpu --quick`. Exit 1 when a step failed.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

RESULTS = ROOT / "bench" / "results" / "gpu_check.json"
MAX_TOTAL_S = 300.0
LIMITS_S = {"tests": 90.0, "model_bench": 100.0, "live": 100.0, "netem": 60.0}  # overlap runs in process
OVERLAP_PRESET = "kimi-linear-mini"


def step(name: str, command: list[str], limit_s: float, env: dict[str, str] | None = None) -> dict[str, Any]:
    """Run one step's command with a time limit: its exit code, seconds and last lines."""
    start = time.monotonic()
    try:
        done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=limit_s,
                              env={**os.environ, **(env or {})})
        code, out = done.returncode, done.stdout + done.stderr
    except subprocess.TimeoutExpired as err:
        code, out = None, f"{name}: over its {limit_s:g} s limit\n{(err.stdout or b'')[-2000:]!r}"
    lines = [line for line in out.splitlines() if line.strip()]
    return {"name": name, "command": command, "exit_code": code, "seconds": round(time.monotonic() - start, 1),
            "tail": lines[-12:], "ok": code == 0}


def run_tests(python: str) -> dict[str, Any]:
    result = step("tests", [python, "-m", "pytest", "-m", "gpu", "-q", "-p", "no:cacheprovider", "tests"],
                  LIMITS_S["tests"])
    summary = next((line for line in reversed(result["tail"]) if " in " in line and ("passed" in line or
                                                                                       "skipped" in line)), "")
    result["summary"] = summary.strip("= ")
    return result


def run_model_bench(python: str, device: str, quick: bool, out_dir: Path) -> dict[str, Any]:
    out = out_dir / "model_stub.json"
    command = [python, "-m", "model_stub", "bench", "--device", device, "--out", str(out)]
    if device == "cpu":  # a CPU only shows that the path runs: the small presets, two lengths
        command += ["--size", "tiny", "--presets", f"{OVERLAP_PRESET},dense-gqa-mini"]
    if quick:
        command.append("--quick")
    result = step("model_bench", command, LIMITS_S["model_bench"])
    if result["ok"]:
        bench = json.loads(out.read_text())
        kimi = bench["presets"][OVERLAP_PRESET]
        lengths = sorted(int(n) for n in kimi["prefill"])
        at = 16384 if 16384 in lengths else lengths[-1]
        result["figures"] = {
            "gemm_tflops": bench["gemm_gflops"]["median"] / 1e3, "dtype": bench["settings"]["dtype"],
            "size": bench["settings"]["size"], "efficiency_tokens": at,
            "prefill_efficiency": {n: p["prefill"][str(at)]["efficiency"] for n, p in bench["presets"].items()},
            "decode_tokens_per_s": kimi["decode_tokens_per_s"],
        }
    return result


def measure_overlap(device: str, quick: bool) -> dict[str, Any]:
    """The share of copy, encode and send time hidden under the next layers' compute, in process."""
    import torch

    from emulator.worker.kv_shipping import LayerShipper, prefill_shipping
    from model_stub.config import get_preset
    from model_stub.model import HybridModel, resolve_device, resolve_dtype

    start = time.monotonic()
    target = resolve_device(device)
    size, tokens = ("tiny", 1024) if target.type == "cpu" else ("base", 4096 if quick else 16384)
    model = HybridModel(get_preset(OVERLAP_PRESET, size, dtype=resolve_dtype("auto", target)), target)
    ids = torch.randint(0, 256, (tokens,), generator=torch.Generator().manual_seed(0)).tolist()
    shipper = LayerShipper(model.device)
    try:
        prefill_shipping(model, ids[:256], shipper, lambda index, frame: None)  # warm-up
        _, _, report = prefill_shipping(model, ids, shipper, lambda index, frame: None)
    finally:
        shipper.close()
    return {"name": "overlap", "ok": True, "seconds": round(time.monotonic() - start, 1), "tokens": tokens,
            "size": size, "overlap": report.overlap, "kv_bytes": report.kv_bytes}


def live_overrides(device: str, visible_gpus: int, quick: bool) -> list[str]:
    """live-quickstart's workers on the device: the remote one pinned to GPU 0, the local two on
    GPUs 1 and 2 when there are that many, else on the CPU (KV then crosses from GPU to CPU)."""
    items = ["model.size=tiny", "duration_s=10"] if quick else []
    if device == "cuda" and visible_gpus >= 1:
        items += ["clusters.remote.device=cuda", "clusters.remote.devices=[0]"]
        if visible_gpus >= 3:
            items += ["clusters.local.device=cuda", "clusters.local.devices=[1, 2]"]
    return items


def run_live(python: str, device: str, visible_gpus: int, quick: bool, out_dir: Path) -> dict[str, Any]:
    out = out_dir / "live"
    command = [python, "-m", "emulator", "run", "scenarios/live-quickstart.yaml", "--engine", "live",
               "--no-broker", "--out", str(out)]
    for item in live_overrides(device, visible_gpus, quick):
        command += ["--set", item]
    result = step("live", command, LIMITS_S["live"])
    summary_path = out / "summary.json"
    if summary_path.exists():
        doc = json.loads(summary_path.read_text())
        summary, meta = doc["summary"], doc["meta"]
        result["figures"] = {key: summary.get(key) for key in ("ttft_p50_s", "ttft_p90_s", "completed",
                                                              "failed_count")}
        result["figures"]["worker_devices"] = meta.get("engine_details", {}).get("worker_devices")
    return result


def run_netem(python: str, out_dir: Path) -> dict[str, Any]:
    from emulator.net.netem_backend import probe_netem

    has_netem, why = probe_netem()
    if not has_netem:
        return {"name": "netem", "ok": True, "skipped": why, "seconds": 0.0}
    tests = step("netem", [python, "-m", "pytest", "-m", "netem", "-q", "-p", "no:cacheprovider", "tests"],
                 LIMITS_S["netem"] / 2)
    fidelity = step("link_fidelity", [python, "bench/link_fidelity.py", "--quick", "--backends", "netem",
                                      "--out", str(out_dir / "link_fidelity.json")], LIMITS_S["netem"] / 2)
    return {"name": "netem", "ok": tests["ok"] and fidelity["ok"], "tests": tests, "link_fidelity": fidelity,
            "seconds": tests["seconds"] + fidelity["seconds"]}


def fmt(value: Any, spec: str = ".2f") -> str:
    return "-" if value is None else format(value, spec)


def table(result: dict[str, Any]) -> str:
    steps = result["steps"]
    bench = steps.get("model_bench", {}).get("figures", {})
    live = steps.get("live", {}).get("figures", {})
    eff = bench.get("prefill_efficiency", {})
    decode = "/".join(f"{v:.0f}" for v in bench.get("decode_tokens_per_s", {}).values()) or "-"
    netem = steps.get("netem", {})
    rows = [
        ("device", f"{result['device']} ({result['device_name']})"),
        ("GEMM TFLOP/s", f"{fmt(bench.get('gemm_tflops'), '.3f')} {bench.get('dtype', '')}".strip()),
        (f"prefill efficiency @{bench.get('efficiency_tokens', '-')}",
         ", ".join(f"{n.removesuffix('-mini')} {v:.0%}" for n, v in eff.items()) or "-"),
        ("decode tok/s (batches)", f"{decode} ({'/'.join(bench.get('decode_tokens_per_s', {}))})"),
        ("live TTFT P50/P90 (s)", f"{fmt(live.get('ttft_p50_s'))} / {fmt(live.get('ttft_p90_s'))}"),
        ("copy/compute overlap", fmt(steps.get("overlap", {}).get("overlap"), ".0%")),
        ("gpu tests", steps.get("tests", {}).get("summary") or "-"),
        ("netem", netem.get("skipped") or ("passed" if netem.get("ok") else "FAILED")),
    ]
    failed = [name for name, s in steps.items() if not s.get("ok")]
    rows.append(("steps", f"all passed in {result['seconds']:.0f} s" if not failed else f"FAILED: {', '.join(failed)}"))
    width = max(len(name) for name, _ in rows)
    return "\n".join(f"{name:<{width}}  {value}" for name, value in rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench/gpu_check.sh", description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--quick", action="store_true", help="CI-sized: quick bench, a 10 s tiny live run")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    import torch

    from emulator.live.placement import count_visible_gpus

    visible = count_visible_gpus() if args.device == "cuda" else 0
    if args.device == "cuda" and not torch.cuda.is_available():
        print("gpu_check: --device cuda but no CUDA device is visible; run with --device cpu", file=sys.stderr)
        return 2
    python, start = sys.executable, time.monotonic()
    name = torch.cuda.get_device_name(0) if args.device == "cuda" else platform.processor() or platform.machine()
    result: dict[str, Any] = {"bench": "gpu_check", "device": args.device, "device_name": name,
                              "visible_gpus": visible, "quick": args.quick, "torch": torch.__version__,
                              "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "steps": {}}
    with tempfile.TemporaryDirectory(prefix="prfaas-gpu-check-") as scratch:
        out_dir = Path(scratch)
        for label, run in (("tests", lambda: run_tests(python)),
                           ("model_bench", lambda: run_model_bench(python, args.device, args.quick, out_dir)),
                           ("overlap", lambda: measure_overlap(args.device, args.quick)),
                           ("live", lambda: run_live(python, args.device, visible, args.quick, out_dir)),
                           ("netem", lambda: run_netem(python, out_dir))):
            print(f"[gpu_check] {label} ...", file=sys.stderr, flush=True)
            try:
                result["steps"][label] = run()
            except Exception as err:  # one broken step must not hide the others' figures
                result["steps"][label] = {"name": label, "ok": False, "error": f"{type(err).__name__}: {err}"}
    result["seconds"] = round(time.monotonic() - start, 1)
    result["within_limit"] = result["seconds"] <= MAX_TOTAL_S
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1))
    print(table(result))
    print(f"results: {args.out}")
    return 0 if all(s.get("ok") for s in result["steps"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
