"""`python -m emulator baselines SCENARIO [--out DIR] [--saturate] [--set a.b=v ...]`: simulate the
paper's three configurations of one scenario (PrfaaS, homogeneous PD, naive heterogeneous) on the
same arrivals, beside the throughput model's Lambda_max; `--saturate` drives each past capacity to
check Lambda_max itself. Prints one JSON object. Argument wiring only (emulator.virtual.baselines).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path

from emulator.scenario import apply_overrides, load_scenario
from emulator.virtual.baselines import CONFIGS, compare_configurations, saturation_throughput

COMMANDS = ("baselines",)


def add_parser(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("baselines", help="simulate PrfaaS, homogeneous PD and naive heterogeneous side by side")
    parser.add_argument("scenario", help="path to a scenario YAML file")
    parser.add_argument("--out", type=Path, help="record each configuration's run in OUT/<config>")
    parser.add_argument("--saturate", action="store_true",
                        help="instead, overload each configuration and compare completions/s with lambda_max")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="PATH=VALUE",
                        help="override a field first (repeatable)")


def run(args: argparse.Namespace) -> int:
    scenario = apply_overrides(load_scenario(args.scenario), args.overrides)
    if args.saturate:
        doc = {}
        for config in CONFIGS:
            point = saturation_throughput(scenario, config)
            doc[config] = {**dataclasses.asdict(point), "relative_error": point.relative_error}
    else:
        doc = compare_configurations(scenario, args.out)
    print(json.dumps(doc, indent=1))
    return 0
