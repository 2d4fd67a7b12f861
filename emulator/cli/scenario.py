"""`python -m emulator validate | optimize SCENARIO | schema`: check a scenario, find its operating
point with the paper's throughput model, publish the JSON Schema of scenario files.

Argument wiring only; the rules live in emulator.scenario. Errors propagate as ScenarioError, which
`__main__` prints one `error: ` line per problem before exiting 2.
"""

from __future__ import annotations

import argparse
import json
import sys

from emulator.cli import sweep as sweep_cli
from emulator.errors import ScenarioError
from emulator.scenario import Scenario, apply_overrides, load_scenario, scenario_json_schema
from emulator.scenario.rules import scenario_warnings

COMMANDS = ("validate", "optimize", "schema")


def add_parser(sub: argparse._SubParsersAction) -> None:
    helps = {"validate": "check a scenario or sweep file; list each problem",
             "optimize": "print the optimal threshold and P/D split, and both baselines, as JSON"}
    for command, text in helps.items():
        parser = sub.add_parser(command, help=text)
        parser.add_argument("scenario", help="path to a scenario YAML file")
        parser.add_argument(
            "--set", dest="overrides", action="append", default=[], metavar="PATH=VALUE",
            help="override a field first (repeatable), e.g. router.threshold_tokens=8000",
        )
    sub.add_parser("schema", help="print the JSON Schema of scenario files")


def run(args: argparse.Namespace) -> int:
    if args.command == "schema":
        print(json.dumps(scenario_json_schema(), indent=2))
        return 0
    if args.command == "validate" and sweep_cli.is_sweep_file(args.scenario):
        return sweep_cli.validate(args.scenario, args.overrides)
    scenario = apply_overrides(load_scenario(args.scenario), args.overrides)
    warnings = [f"warning: {line}" for line in scenario_warnings(scenario)]
    if args.command == "optimize":  # stdout is one JSON object: warnings go to stderr
        for line in warnings:
            print(line, file=sys.stderr)
        from emulator.analytic import optimize_scenario

        print(json.dumps(optimize_scenario(scenario), indent=1))
        return 0
    events = len(scenario.timeline)
    files = file_lines(scenario)
    for line in warnings:
        print(line)
    for line in files:
        print(line)
    print(f"ok: {scenario.name} ({scenario.engine}, {events} timeline events)")
    return 0


def file_lines(scenario: Scenario) -> list[str]:
    """Every row of the workload's files read (traces, lengths): a line per file that reads
    cleanly; bad rows fail validation with their line numbers, or, where the trace says
    `bad_rows: skip`, are a warning."""
    from emulator.workload.build import check_files  # numpy and the readers: validate only

    skip = scenario.workload.trace is not None and scenario.workload.trace.bad_rows == "skip"
    lines, problems = [], []
    for what, check in check_files(scenario):
        rest = check.num_problems - len(check.problems)
        more = [f"{what}: {rest:,} more bad rows"] if rest else []
        if not check.num_problems:
            lines.append(f"{what}: {check.num_rows:,} rows read")
        elif skip and what.startswith("trace"):
            lines += [f"warning: {p} (skipped: bad_rows: skip)" for p in [*check.problems, *more]]
            lines.append(f"{what}: {check.num_rows - check.num_problems:,} of {check.num_rows:,} rows read")
        else:
            hint = ("; fix them, or set workload.trace.bad_rows: skip to replay the rest"
                    if what.startswith("trace") else "; fix them")
            problems += [*check.problems, *more, f"{what}: {check.num_problems:,} bad of {check.num_rows:,} rows{hint}"]
    if problems:
        raise ScenarioError("\n".join(problems))
    return lines
