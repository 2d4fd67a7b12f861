"""`python -m emulator validate | optimize SCENARIO | schema`: check a scenario, find its operating
point with the paper's throughput model, publish the JSON Schema of scenario files.

Argument wiring only; the rules live in emulator.scenario. Errors propagate as ScenarioError, which
`__main__` prints one `error: ` line per problem before exiting 2.
"""

from __future__ import annotations

import argparse
import json
import sys

from emulator.scenario import apply_overrides, load_scenario, scenario_json_schema
from emulator.scenario.rules import scenario_warnings

COMMANDS = ("validate", "optimize", "schema")


def add_parser(sub: argparse._SubParsersAction) -> None:
    helps = {"validate": "check a scenario file; list each problem",
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
    scenario = apply_overrides(load_scenario(args.scenario), args.overrides)
    warnings = [f"warning: {line}" for line in scenario_warnings(scenario)]
    if args.command == "optimize":  # stdout is one JSON object: warnings go to stderr
        for line in warnings:
            print(line, file=sys.stderr)
        from emulator.analytic import optimize_scenario

        print(json.dumps(optimize_scenario(scenario), indent=1))
        return 0
    events = len(scenario.timeline)
    for line in warnings:
        print(line)
    print(f"ok: {scenario.name} ({scenario.engine}, {events} timeline events)")
    return 0
