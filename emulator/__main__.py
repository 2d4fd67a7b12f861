"""`python -m emulator ...`: exit 0 ok, 1 a scenario expectation failed, 2 bad input (one line).
Each command lives in emulator/cli/; this module only builds the parser and dispatches."""

from __future__ import annotations

import argparse
import logging
import sys

import emulator.virtual.accel_on  # noqa: F401  (first: run and calibrate use the compiled build)
from emulator.cli import (
    accel as accel_cli,
    baselines as baselines_cli,
    calibrate as calibrate_cli,
    compare as compare_cli,
    net as net_cli,
    run as run_cli,
    scenario as scenario_cli,
    sweep as sweep_cli,
)
from emulator.errors import PrfaasError


def make_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m emulator", description="PrfaaS Lab emulator")
    parser.add_argument("-v", "--verbose", action="store_true")
    sub = parser.add_subparsers(dest="command", required=True)
    net_cli.add_parser(sub)
    scenario_cli.add_parser(sub)
    run_cli.add_parser(sub)
    compare_cli.add_parser(sub)
    calibrate_cli.add_parser(sub)
    baselines_cli.add_parser(sub)
    accel_cli.add_parser(sub)
    sweep_cli.add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = make_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, format="%(message)s")
    try:
        if args.command == "net":
            return net_cli.run(args)
        if args.command in scenario_cli.COMMANDS:
            return scenario_cli.run(args)
        if args.command in run_cli.COMMANDS:
            return run_cli.run(args)
        if args.command in compare_cli.COMMANDS:
            return compare_cli.run(args)
        if args.command in calibrate_cli.COMMANDS:
            return calibrate_cli.run(args)
        if args.command in baselines_cli.COMMANDS:
            return baselines_cli.run(args)
        if args.command in accel_cli.COMMANDS:
            return accel_cli.run(args)
        if args.command in sweep_cli.COMMANDS:
            return sweep_cli.run(args)
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        return 130
    except PrfaasError as err:
        for line in str(err).splitlines() or [type(err).__name__]:
            print(f"error: {line}", file=sys.stderr)
        return 2
    return 2


if __name__ == "__main__":
    sys.exit(main())
