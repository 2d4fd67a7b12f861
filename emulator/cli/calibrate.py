"""`python -m emulator calibrate SCENARIO.yaml RUN_DIR [--out DIR]`: fit the virtual engine's profile
to a recorded (live) run of SCENARIO, replay the scenario on the virtual engine with it (same seed,
same arrivals), and print how far the replay's TTFT is from the run's. Argument wiring only; the
fit is emulator.virtual.calibrate, the comparison emulator.telemetry.compare.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from emulator.scenario import load_scenario
from emulator.telemetry.compare import compare_runs, format_table
from emulator.virtual.calibrate import calibrated_scenario, profile_from_run, write_profile
from emulator.virtual.engine import run_virtual

COMMANDS = ("calibrate",)


def add_parser(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("calibrate", help="fit a profile to a recorded run and replay it on the virtual engine")
    parser.add_argument("scenario", type=Path,
                        help="the scenario the run recorded (e.g. scenarios/live-quickstart.yaml)")
    parser.add_argument("run_dir", type=Path, help="the recorded run (the --out of `run --engine live`)")
    parser.add_argument("--out", type=Path, default=None,
                        help="where the replay and its profile.yaml go (default: RUN_DIR-calibrated)")


def run(args: argparse.Namespace) -> int:
    out = args.out or args.run_dir.with_name(f"{args.run_dir.name}-calibrated")
    scenario = load_scenario(args.scenario)
    tables = profile_from_run(args.run_dir, remote_device="remote", local_device="local")
    out.mkdir(parents=True, exist_ok=True)
    print(f"profile ({tables.source}): {write_profile(tables, out / 'profile.yaml')}")
    run_virtual(calibrated_scenario(scenario, args.run_dir), out)
    print(f"virtual replay: {out}")
    print(format_table(compare_runs(args.run_dir, out)))
    return 0
