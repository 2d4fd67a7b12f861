"""`python -m emulator calibrate SCENARIO.yaml RUN_DIR [--out DIR]`: fit the virtual engine's profile
to a recorded (live) run of SCENARIO, replay the scenario on the virtual engine with it (same seed,
same arrivals), and print how far the replay's TTFT is from the run's.

`python -m emulator calibrate SCENARIO.yaml --machine [--out FILE] [--quick]`: profile SCENARIO's
live model on this machine as its live workers run it (prefill by length, KV bytes, decode step by
batch size, the slowdown of n busy workers sharing the cores) and write a profile file that a
scenario names as `model: {profile_file: FILE}`. With `--rescale PROFILE`, only the profile's
reference prefill is timed again and PROFILE's times are scaled to this machine's speed now
(emulator/live/speed_reference.py), written to FILE (default: PROFILE itself).

`python -m emulator calibrate SCENARIO.yaml RUN_DIR --onto PROFILE [--out FILE]`: RUN_DIR is a
short live run of SCENARIO; it is replayed on the virtual engine with the machine profile PROFILE
and PROFILE's times are multiplied by what the live stack added per request (prefill and TPOT,
emulator/virtual/stack_factors.py) and, when the run's link is lossy, its host's loss_rate_factor
set to what the stack left of the loss-limited rate; written to FILE (default: PROFILE itself).

Argument wiring only; the fit is emulator.virtual.calibrate, the comparison
emulator.telemetry.compare, the machine profile emulator.live.machine_profile.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from emulator.errors import ScenarioError
from emulator.scenario import Scenario, load_scenario
from emulator.telemetry.compare import compare_runs, format_table
from emulator.virtual.calibrate import calibrated_scenario, profile_from_run, write_profile
from emulator.virtual.engine import run_virtual

COMMANDS = ("calibrate",)


def add_parser(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("calibrate", help="fit a profile to a recorded run, or measure this machine (--machine)")
    parser.add_argument("scenario", type=Path,
                        help="the scenario the run recorded, or whose live model to profile "
                             "(e.g. scenarios/live-quickstart.yaml)")
    parser.add_argument("run_dir", type=Path, nargs="?", default=None,
                        help="the recorded run (the --out of `run --engine live`); omit with --machine")
    parser.add_argument("--machine", action="store_true",
                        help="profile the scenario's live model on this machine instead of fitting a run")
    parser.add_argument("--quick", action="store_true",
                        help="--machine: fewer lengths, one repeat, shorter sharing rounds (about a minute)")
    parser.add_argument("--rescale", type=Path, default=None, metavar="PROFILE",
                        help="--machine: time PROFILE's reference prefill again (about 10 s) and scale its times "
                             "to this machine's speed now, for a run long after the calibration")
    parser.add_argument("--onto", type=Path, default=None, metavar="PROFILE",
                        help="RUN_DIR: fold what the live stack added in that run (prefill, TPOT; on a lossy link the "
                             "loss-limited rate) into the machine profile PROFILE instead of fitting a profile of its own")
    parser.add_argument("--out", type=Path, default=None,
                        help="RUN_DIR: where the replay and its profile.yaml go (default: RUN_DIR-calibrated); "
                             "--machine: the profile file (default: profiles/PRESET-SIZE-HOST.yaml)")


def run(args: argparse.Namespace) -> int:
    if (args.run_dir is None) == (not args.machine):
        given = "both RUN_DIR and --machine" if args.machine else "neither RUN_DIR nor --machine"
        raise ScenarioError(f"calibrate: {given} given; give a recorded run's folder, or --machine to "
                            "measure this machine")
    if args.quick and not args.machine:
        raise ScenarioError("calibrate --quick: applies to --machine only; drop it or add --machine")
    if args.rescale is not None and (not args.machine or args.quick):
        raise ScenarioError("calibrate --rescale: applies to --machine without --quick; it times one reference, "
                            "not a grid")
    scenario = load_scenario(args.scenario)
    if args.onto is not None and args.run_dir is None:
        raise ScenarioError("calibrate --onto: needs RUN_DIR, a short live run of the scenario to measure the "
                            "stack on; record one with `run --engine live` first")
    if args.rescale is not None:
        return _rescale(args.rescale, args.out or args.rescale)
    if args.onto is not None:
        return _onto(scenario, args.run_dir, args.onto, args.out or args.onto)
    return _machine(scenario, args.out, args.quick) if args.machine else _from_run(scenario, args.run_dir, args.out)


def _from_run(scenario: Scenario, run_dir: Path, out: Path | None) -> int:
    out = out or run_dir.with_name(f"{run_dir.name}-calibrated")
    tables = profile_from_run(run_dir, remote_device="remote", local_device="local")
    out.mkdir(parents=True, exist_ok=True)
    print(f"profile ({tables.source}): {write_profile(tables, out / 'profile.yaml')}")
    run_virtual(calibrated_scenario(scenario, run_dir), out)
    print(f"virtual replay: {out}")
    print(format_table(compare_runs(run_dir, out)))
    return 0


def _machine(scenario: Scenario, out: Path | None, quick: bool) -> int:
    from emulator.live.machine_profile import (  # the live side: only this command needs it
        default_profile_path,
        measure_machine,
        plan_machine,
        write_machine_profile,
    )

    plan = plan_machine(scenario, quick)
    path = write_machine_profile(measure_machine(plan, lambda line: print(line, flush=True)), scenario,
                                 out or default_profile_path(plan))
    print(f"profile: {path}\n  name it from a scenario as model: {{profile_file: {path}}} "
          "(a path relative to the scenario file's folder)")
    return 0


def _rescale(profile_path: Path, out: Path) -> int:
    from emulator.live.speed_reference import reference_now, rescaled, write_rescaled
    from emulator.scenario.model_section import read_profile_file

    loaded = read_profile_file(profile_path)
    reference = reference_now(loaded)
    scaled = rescaled(loaded, reference.value)
    assert scaled.measured is not None and scaled.measured.reference_prefill_s is not None
    print(f"reference prefill now {reference.value:.4f} s{reference.note} against "
          f"{scaled.measured.reference_prefill_s:.4f} s when measured: times x{scaled.measured.speed_scale:.3f}\n"
          f"profile: {write_rescaled(scaled, out)}")
    return 0


def _onto(scenario: Scenario, run_dir: Path, profile_path: Path, out: Path) -> int:
    from emulator.virtual.stack_factors import stacked_profile, write_with_stack

    stacked, factors = stacked_profile(scenario, run_dir, profile_path)
    path = write_with_stack(stacked, run_dir, out)
    host = stacked.model.profile.host
    loss = f", loss-limited rate x{host.loss_rate_factor:g}" if scenario.link.to_local.loss_pct > 0 and host else ""
    print(f"live stack over the profile ({factors.requests} requests): prefill {factors.prefill_s * 1e3:.1f} ms + "
          f"x{factors.prefill:.3f}, decode x{factors.decode:.3f}{loss}\nprofile: {path}")
    return 0
