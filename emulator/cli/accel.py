"""`python -m emulator accel build|ensure|status`: build the compiled virtual engine, or say which
one runs. Argument wiring only; the build and its checks live in emulator.virtual.accel."""

from __future__ import annotations

import argparse
import sys
import time

from emulator.virtual.accel import COMPILED, build, build_dir, build_problem, check

COMMANDS = ("accel",)


def add_parser(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("accel", help="build the compiled virtual engine, or say which one runs")
    parser.add_argument("action", choices=("build", "ensure", "status"),
                        help="ensure builds only when the current build is missing or stale")


def run(args: argparse.Namespace) -> int:
    if args.action == "status":
        why_not = check(build_dir())
        print("compiled" if why_not is None else f"interpreted: {why_not}")
        return 0
    if args.action == "ensure" and build_problem(build_dir()) is None:
        print(f"accel: {build_dir()} is current")
        return 0
    start = time.perf_counter()
    try:
        directory = build()
    except (ImportError, SystemExit, Exception) as exc:  # mypyc exits on a type error
        print(f"accel: build failed ({type(exc).__name__}: {exc}); the interpreted engine runs",
              file=sys.stderr)
        return 1
    print(f"accel: compiled {len(COMPILED)} modules into {directory} in {time.perf_counter() - start:.0f} s")
    return 0
