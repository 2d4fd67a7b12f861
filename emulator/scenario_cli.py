"""`python -m emulator validate SCENARIO | schema`: check a scenario file, publish its JSON Schema.

Argument wiring only; the rules live in emulator.scenario. Errors propagate as ScenarioError, which
`__main__` prints one `error: ` line per problem before exiting 2.
"""

from __future__ import annotations

import argparse
import json

from emulator.scenario import apply_overrides, load_scenario, scenario_json_schema

COMMANDS = ("validate", "schema")


def add_parser(sub: argparse._SubParsersAction) -> None:
    validate = sub.add_parser("validate", help="check a scenario file; list each problem")
    validate.add_argument("scenario", help="path to a scenario YAML file")
    validate.add_argument(
        "--set", dest="overrides", action="append", default=[], metavar="PATH=VALUE",
        help="override a field first (repeatable), e.g. router.threshold_tokens=8000",
    )
    sub.add_parser("schema", help="print the JSON Schema of scenario files")


def run(args: argparse.Namespace) -> int:
    if args.command == "schema":
        print(json.dumps(scenario_json_schema(), indent=2))
        return 0
    scenario = apply_overrides(load_scenario(args.scenario), args.overrides)
    events = len(scenario.timeline)
    print(f"ok: {scenario.name} ({scenario.engine}, {events} timeline events)")
    return 0
