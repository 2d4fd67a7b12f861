"""`python -m emulator compare RUN_A RUN_B [--out PAGE.html]`: print both runs' headline numbers with
B's relative difference to A, in a table that fits the terminal, and write the table and both TTFT
CDFs as an HTML page (default: beside RUN_A, `compare-<A>-vs-<B>.html`). Argument wiring only; a
directory that is not a recorded run raises TelemetryError (`__main__` prints it and exits 2).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from emulator.telemetry.compare import compare_runs, default_out, format_table, write_cdf_html

COMMANDS = ("compare",)


def add_parser(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("compare", help="compare two recorded runs (TTFT, throughput, egress)")
    parser.add_argument("run_a", help="a run directory (the --out of `run`)")
    parser.add_argument("run_b", help="another run directory; differences are B against A")
    parser.add_argument("--out", type=Path, default=None,
                        help="where to write the HTML page (default: beside RUN_A, compare-<A>-vs-<B>.html)")


def run(args: argparse.Namespace) -> int:
    comparison = compare_runs(args.run_a, args.run_b)
    print(format_table(comparison))
    path = write_cdf_html(comparison, args.out or default_out(args.run_a, args.run_b))
    print(f"wrote the table and both TTFT CDFs to {path} ({path.stat().st_size / 1024:.0f} KiB)")
    return 0
