"""How long the paper's exhaustive (t, N_p/N_d) grid search takes on the case study, on one core.

Times `optimize` (the PrfaaS search and both baselines) on the inputs of ../shared/paper-model.md
after a warm-up, N times; the issue's target is a median under 1 s. Writes
bench/results/optimizer.json and prints a short table.

    python bench/optimizer.py [--quick] [--check]
"""

from __future__ import annotations

import os

# One core, as the target says: pin the math libraries' thread pools before numpy loads them.
for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "1"

import argparse  # noqa: E402
import json  # noqa: E402
import platform  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from emulator.control.throughput_model import (  # noqa: E402
    ModelInputs,
    Plan,
    default_t_grid,
    optimize,
)
from emulator.plane.inputs import model_inputs  # noqa: E402
from emulator.scenario import load_scenario  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results" / "optimizer.json"
TARGET_S = 1.0
CASE_STUDY = Path(__file__).resolve().parents[1] / "scenarios" / "paper-case-study.yaml"


def case_study_inputs() -> ModelInputs:
    """The inputs `python -m emulator optimize scenarios/paper-case-study.yaml` searches."""
    return model_inputs(load_scenario(CASE_STUDY))[0]


def measure(inputs: ModelInputs, repeats: int, warmup: int) -> tuple[list[float], Plan]:
    """Wall time of `optimize(inputs)`, `repeats` times after `warmup` untimed calls."""
    plan = optimize(inputs)
    for _ in range(warmup - 1):
        optimize(inputs)
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        plan = optimize(inputs)
        samples.append(time.perf_counter() - start)
    return samples, plan


def summarise(samples: list[float]) -> dict[str, float]:
    q1, _, q3 = statistics.quantiles(samples, n=4) if len(samples) > 1 else (samples[0],) * 3
    return {"median_s": statistics.median(samples), "min_s": min(samples), "max_s": max(samples),
            "iqr_s": q3 - q1, "target_s": TARGET_S}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="5 repeats instead of 20")
    parser.add_argument("--check", action="store_true",
                        help=f"exit 1 if the median >= {TARGET_S} s")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    repeats, warmup = (5, 1) if args.quick else (20, 3)

    start = time.perf_counter()
    inputs = case_study_inputs()
    build_s = time.perf_counter() - start
    samples, plan = measure(inputs, repeats, warmup)
    grid_points = int(default_t_grid(inputs.lengths).size)
    summary = {**summarise(samples), "build_inputs_s": build_s, "grid_points": grid_points,
               "n_p_values": inputs.num_local - 1}
    results = {
        "bench": "optimizer",
        "machine": {"cpus": os.cpu_count(), "kernel": platform.release(),
                    "python": platform.python_version(), "numpy": np.__version__, "threads": 1},
        "git_sha": subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True,
                                  text=True).stdout.strip(),
        "config": {"scenario": str(CASE_STUDY.relative_to(CASE_STUDY.parents[1])), "repeats": repeats,
                   "warmup": warmup, "quick": args.quick},
        "samples_s": samples, "summary": summary, "plan": plan.as_dict(),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=1))

    p = plan.prfaas
    print(f"optimize (case study, {grid_points} t x {inputs.num_local - 1} N_p, 1 thread), "
          f"{repeats} repeats after {warmup} warm-up")
    print(f"  median {summary['median_s'] * 1e3:.1f} ms, min {summary['min_s'] * 1e3:.1f}, "
          f"max {summary['max_s'] * 1e3:.1f}, IQR {summary['iqr_s'] * 1e3:.2f} ms "
          f"(target < {TARGET_S:.0f} s); building the length sample {build_s * 1e3:.1f} ms")
    print(f"  prfaas: t {p.t:.0f}, N_p:N_d {p.n_p}:{p.n_d}, {p.lambda_max:.3f} req/s; "
          f"{plan.gain_vs_homogeneous:+.1%} vs homogeneous, {plan.gain_vs_naive:+.1%} vs naive")
    print(f"results: {args.out}")
    missed = summary["median_s"] >= TARGET_S
    if missed:
        print(f"MISSED: median {summary['median_s']:.3f} s >= {TARGET_S} s")
    return 1 if args.check and missed else 0


if __name__ == "__main__":
    sys.exit(main())
