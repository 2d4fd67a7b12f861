"""`python -m emulator sweep SWEEP.yaml --out DIR [--ray ADDRESS] [--workers N]`: run a sweep's
points as Ray tasks into DIR/sweep.parquet and DIR/sweep.json; points already there are skipped.
A progress bar on a terminal, a progress line every few seconds elsewhere. Argument wiring and
printing only; the work is emulator.sweep's.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from emulator.cli.progress import ProgressReporter

COMMANDS = ("sweep",)


def add_parser(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("sweep", help="run a sweep file's points (virtual/analytic) as Ray tasks")
    parser.add_argument("sweep", type=Path, help="path to a sweep YAML file (scenarios/sweeps/)")
    parser.add_argument("--out", type=Path, help="output directory (default sweeps/<name>); re-running "
                        "into it runs only the points not yet there")
    parser.add_argument("--ray", metavar="ADDRESS", help="join an existing Ray cluster at HOST:PORT (from "
                        "`ray start --head`, with RAY_AUTH_MODE=token and the head's token as README.md shows; "
                        "`auto`: the one started on this machine) instead of starting a local one")
    parser.add_argument("--workers", type=int, help="CPUs of the local Ray (default: every core)")


def run(args: argparse.Namespace) -> int:
    from emulator.sweep import expand, load_sweep, run_sweep

    sweep = load_sweep(args.sweep)
    out = args.out or Path("sweeps") / sweep.spec.name
    print(f"{sweep.spec.name}: {len(expand(sweep.spec)):,} points -> {out}", file=sys.stderr)
    bar = ProgressReporter("points", sys.stderr.isatty())
    try:
        result = run_sweep(sweep, out, address=args.ray, workers=args.workers,
                           progress=lambda done, total, failed: bar(done, total, f"{failed:,} failed"))
    finally:
        bar.close()
    print(f"{sweep.spec.name}: {result.num_ran:,} points run ({result.num_failed:,} failed), "
          f"{result.num_before:,} already done, {result.num_points:,} in all: {out}/sweep.parquet, "
          f"{out}/report.html")
    return 0


def is_sweep_file(path: str | Path) -> bool:
    """Whether `validate` was given a sweep file (a top-level `axes:`); an unreadable file is left
    to the scenario reader, which names its problem."""
    from emulator.errors import ScenarioError
    from emulator.sweep.spec import is_sweep_document, read_document

    try:
        return is_sweep_document(read_document(Path(path))[1])
    except ScenarioError:
        return False


def validate(path: str | Path, overrides: list[str]) -> int:
    """`validate SWEEP.yaml`: the sweep file, its base scenario and its axis paths."""
    from emulator.errors import ScenarioError
    from emulator.sweep import expand, load_sweep

    if overrides:
        raise ScenarioError("--set: a sweep file takes fixed overrides in its `set:` list; move them there")
    sweep = load_sweep(path)
    print(f"ok: {sweep.spec.name} (sweep, {len(expand(sweep.spec)):,} points)")
    return 0
