"""bench/sim_vs_live.py's verdicts and pages: each figure's error (virtual / live - 1), the goals it
is held to, the printed table, and an offline HTML report (the table and, per configuration, the
live and virtual TTFT CDFs as inline SVG, in the project's run colours)."""

from __future__ import annotations

import html
from pathlib import Path
from typing import Any

import numpy as np

from emulator.telemetry.palette import run_color
from emulator.telemetry.svg_chart import StepLine, step_chart_svg

FIGURES = (  # (key, column title, unit scale, unit)
    ("ttft_mean_s", "TTFT mean", 1.0, "s"), ("ttft_p50_s", "P50", 1.0, "s"), ("ttft_p90_s", "P90", 1.0, "s"),
    ("ttft_p99_s", "P99", 1.0, "s"), ("tpot_mean_s", "TPOT", 1000.0, "ms"),
    ("throughput_rps", "throughput", 1.0, "/s"), ("remote_share", "remote", 100.0, "%"),
    ("egress_mbit_s", "egress", 1.0, "Mbit/s"),
)
GOALS = {"ttft_mean_s": 0.05, "ttft_p90_s": 0.10, "throughput_rps": 0.03, "remote_share": 0.03}


def errors_of(live: dict[str, Any], virtual: dict[str, Any]) -> dict[str, float | None]:
    """virtual / live - 1 per figure; None where either is missing or live is 0."""
    out: dict[str, float | None] = {}
    for key, *_ in FIGURES:
        a, b = live.get(key), virtual.get(key)
        out[key] = b / a - 1 if a and b is not None else None
    return out


def missed_goals(rows: list[dict[str, Any]]) -> list[str]:
    return [f"{row['name']}: {key} error {row['error'][key]:+.1%} (goal within {goal:.0%})"
            if row["error"][key] is not None else f"{row['name']}: {key} missing on one engine"
            for row in rows for key, goal in GOALS.items()
            if row["error"][key] is None or abs(row["error"][key]) > goal]


def _cell(row: dict[str, Any], key: str, scale: float) -> tuple[str, str, str]:
    live, virtual, error = row["live"].get(key), row["virtual"].get(key), row["error"].get(key)
    show = (lambda v: "-" if v is None else f"{v * scale:.3g}")  # noqa: E731
    mark = "" if key not in GOALS or error is None or abs(error) <= GOALS[key] else "!"
    return show(live), show(virtual), "-" if error is None else f"{error:+.1%}{mark}"


def format_table(rows: list[dict[str, Any]]) -> str:
    """Per configuration: live, virtual and error of each figure; `!` marks a missed goal."""
    lines = []
    for row in rows:
        lines.append(f"{row['name']}: {row['what']} ({row['live']['completed']}/{row['live']['requests']} live, "
                     f"{row['virtual']['completed']}/{row['virtual']['requests']} virtual completed; "
                     f"{_drift(row)})")
        for key, title, scale, unit in FIGURES:
            live, virtual, error = _cell(row, key, scale)
            lines.append(f"  {title + ' (' + unit + ')':<18}{live:>10}{virtual:>10}{error:>10}")
    goals = ", ".join(f"{key} {goal:.0%}" for key, goal in GOALS.items())
    return "\n".join([f"{'':20}{'live':>10}{'virtual':>10}{'error':>10}", *lines, f"goals: {goals}"])


def _drift(row: dict[str, Any]) -> str:
    """The machine's speed during the live run against the profile's, from the reference readings
    (older results carry the scale their virtual run was charged instead)."""
    if "machine_drift" in row:
        if row["machine_drift"] is None:
            return "machine not timed around the run (--quick)"
        return f"machine {1 + row['machine_drift']:.3f}x the profile's prefill time"
    return f"profile x{row.get('speed_scale') or 1:.3f}"


def _summary_table(rows: list[dict[str, Any]]) -> str:
    head = "".join(f"<th>{html.escape(title)} ({unit})<br>live / virtual / error</th>" for _, title, _, unit in FIGURES)
    body = []
    for row in rows:
        cells = []
        for key, _, scale, _ in FIGURES:
            live, virtual, error = _cell(row, key, scale)
            style = " style='color:#b00020'" if error.endswith("!") else ""
            cells.append(f"<td>{live} / {virtual} / <b{style}>{error.rstrip('!')}</b></td>")
        body.append(f"<tr><th>{html.escape(row['name'])}<br><small>{html.escape(row['what'])}; "
                    f"{html.escape(_drift(row))}</small></th>"
                    f"{''.join(cells)}</tr>")
    return f"<table border='1' cellpadding='4' style='border-collapse:collapse'><tr><th></th>{head}</tr>{''.join(body)}</table>"


def write_report(result: dict[str, Any], path: Path) -> Path:
    rows = result["configs"]
    charts = []
    for row in rows:
        lines = [StepLine(engine, run_color(i), row[engine]["ttfts_s"],
                          np.arange(1, len(row[engine]["ttfts_s"]) + 1) / max(len(row[engine]["ttfts_s"]), 1))
                 for i, engine in enumerate(("live", "virtual")) if row[engine]["ttfts_s"]]
        if lines:
            charts.append(f"<h3>{html.escape(row['name'])}: {html.escape(row['what'])}</h3>"
                          + step_chart_svg(lines, "TTFT (s)", "fraction of completed requests", height=300))
    goals = ", ".join(f"{key} within {goal:.0%}" for key, goal in GOALS.items())
    page = (f"<!DOCTYPE html>\n<html><head><meta charset='utf-8'><title>sim vs live</title></head>\n"
            f"<body style='font-family: system-ui, sans-serif'><h1>Virtual engine vs live testbed, out of sample</h1>\n"
            f"<p>{html.escape(result['date'])}, commit {html.escape(result['git_sha'][:12])}, "
            f"{result['requests_per_config']} requests per configuration, calibrated capacity "
            f"{result['capacity_per_s']:.3f}/s. Error = virtual / live - 1. Goals: {html.escape(goals)}.</p>\n"
            f"{_summary_table(rows)}\n<h2>TTFT CDFs</h2>\n{''.join(charts)}\n</body></html>\n")
    path.write_text(page, encoding="utf-8")
    return path
