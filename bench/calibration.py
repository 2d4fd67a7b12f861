"""How far the virtual engine's predictions are from a live run of the same scenario.

Runs `live-quickstart` on the live engine, fits a profile of the small model from that run
(prefill time and KV bytes against length per cluster, the decode step), replays the same scenario
(same seed, so the same arrivals and lengths) on the virtual engine with that profile, and compares
TTFT mean and P90. Target (the [Virtual engine] issue): both within 15 %. Needs root.

    python bench/calibration.py [--quick] [--check]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from emulator.live.session import run_live  # noqa: E402
from emulator.scenario import apply_overrides, load_scenario  # noqa: E402
from emulator.virtual.calibrate import calibrated_scenario, profile_from_run  # noqa: E402
from emulator.virtual.engine import run_virtual  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results" / "calibration.json"
TARGET = 0.15


def ttft_stats(run_dir: Path) -> dict[str, float]:
    requests = pd.read_parquet(run_dir / "requests.parquet")
    ttft = requests.loc[requests["status"] == "completed", "ttft_s"]
    return {"requests": int(len(requests)), "completed": int(len(ttft)), "ttft_mean_s": float(ttft.mean()),
            "ttft_p50_s": float(ttft.quantile(0.5)), "ttft_p90_s": float(ttft.quantile(0.9))}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="20 s of arrivals instead of the scenario's 45")
    parser.add_argument("--check", action="store_true")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    if os.geteuid() != 0:
        print("bench/calibration.py needs root (namespaces and the tun link)", file=sys.stderr)
        return 2
    scenario = load_scenario(ROOT / "scenarios" / "live-quickstart.yaml")
    if args.quick:
        scenario = apply_overrides(scenario, ["duration_s=20"])
    work = Path(tempfile.mkdtemp(prefix="prf-calibration-"))
    live_dir, virtual_dir = work / "live", work / "virtual"
    asyncio.run(run_live(scenario, live_dir, embedded_broker=False))
    tables = profile_from_run(live_dir)
    run_virtual(calibrated_scenario(scenario, live_dir), virtual_dir)
    live, virtual = ttft_stats(live_dir), ttft_stats(virtual_dir)
    errors = {k: virtual[k] / live[k] - 1 for k in ("ttft_mean_s", "ttft_p50_s", "ttft_p90_s")}
    result = {
        "bench": "calibration", "scenario": scenario.name, "duration_s": scenario.duration_s,
        "git_sha": subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True,
                                  cwd=ROOT).stdout.strip(),
        "cpus": os.cpu_count(), "profile": {"source": tables.source, "lengths": tables.lengths,
                                            "kv_bytes": tables.kv_bytes, "prefill_s": tables.prefill_s,
                                            "decode_step_s": tables.decode_step_s},
        "live": live, "virtual": virtual, "relative_error": errors, "target": TARGET, "runs": str(work),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1, default=list))
    print(f"{'':12}{'live':>10}{'virtual':>10}{'error':>9}")
    for key, label in (("ttft_mean_s", "TTFT mean"), ("ttft_p50_s", "TTFT P50"), ("ttft_p90_s", "TTFT P90")):
        print(f"{label:12}{live[key]:>9.3f}s{virtual[key]:>9.3f}s{errors[key]:>+9.1%}")
    print(f"requests: live {live['completed']}/{live['requests']}, "
          f"virtual {virtual['completed']}/{virtual['requests']}")
    print(f"results: {args.out}")
    missed = [k for k in ("ttft_mean_s", "ttft_p90_s") if abs(errors[k]) > TARGET]
    for key in missed:
        print(f"MISSED: {key} error {errors[key]:+.1%} (target within {TARGET:.0%})")
    return 1 if args.check and missed else 0


if __name__ == "__main__":
    sys.exit(main())
