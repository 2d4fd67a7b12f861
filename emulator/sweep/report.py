"""A sweep's self-contained report.html, beside sweep.parquet: what ran, the findings that apply
(findings.py: the paper's Figure 5, the bandwidth crossover), a metric along each axis with a band
over the seeds, the Pareto front where throughput and TTFT were kept, and the failed points with
their reasons. plotly.js is inlined once, so it opens offline. Rewritten at the end of every
invocation, an interrupted one included.
"""

from __future__ import annotations

import html
from pathlib import Path
from typing import Any

import pandas as pd
import plotly.graph_objects as go
from plotly.offline import get_plotlyjs

from emulator.sweep.figures import LATENCY, OK, THROUGHPUT, along_axis, lines_figure, pareto_figure
from emulator.sweep.findings import (
    Crossover,
    Figure5,
    crossover,
    crossover_figure,
    crossover_sentence,
    figure5_figures,
    sweep_figure5,
)
from emulator.sweep.spec import Sweep
from emulator.telemetry.labels import label, setting_label

REPORT_FILE = "report.html"
MAX_METRIC_CHARTS = 8  # charts along an axis: the first kept metrics, the rest are in the parquet
_STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1100px; color: #222; }
table { border-collapse: collapse; } td, th { padding: 2px 12px; border-bottom: 1px solid #ddd; }
th { text-align: left; font-weight: 600; } .fail { color: #b00020; } section { margin-top: 2em; }
"""


def write_report(out_dir: str | Path, sweep: Sweep, rows: pd.DataFrame, doc: dict[str, Any]) -> Path:
    """Write report.html into `out_dir` and return its path."""
    spec = sweep.spec
    sections = [_section("Sweep", _overview(sweep, doc))]
    if (f5 := sweep_figure5(rows, sweep)) is not None:
        sections.append(_figure5_section(f5))
    if (c := crossover(rows)) is not None:
        sections.append(_crossover_section(c))
    axes = [a for a in spec.axis_names if a != "configuration"]
    by = "configuration" if spec.configurations else None
    for axis in axes[:2]:
        along = along_axis(rows, spec, axis)
        varying = [m for m in spec.metrics if m in along.columns and not _constant(along[m])]
        for metric in varying[:MAX_METRIC_CHARTS]:
            sections.append(_section(f"{label(metric)} along {setting_label(axis)}",
                                     _figure(lines_figure(along, axis, metric, by=by))))
    if {THROUGHPUT, LATENCY} <= set(rows.columns):
        sections.append(_section("Pareto front: throughput against TTFT P90", _figure(pareto_figure(rows, axes))))
    sections.append(_section("Failed points", _failures(rows)))
    title = html.escape(f"PrfaaS sweep {spec.name}")
    page = (f"<!DOCTYPE html>\n<html><head><meta charset='utf-8'><title>{title}</title><style>{_STYLE}</style>\n"
            f"<script type='text/javascript'>{get_plotlyjs()}</script></head>\n"
            f"<body><h1>{title}</h1>\n{''.join(sections)}</body></html>\n")
    path = Path(out_dir) / REPORT_FILE
    path.write_text(page, encoding="utf-8")
    return path


def _constant(values: pd.Series) -> bool:
    """No figure (all missing), or one value at every point (the optimizer's t in each row)."""
    known = values.dropna()
    return known.empty or (len(known) > 1 and known.nunique() == 1)


def _overview(sweep: Sweep, doc: dict[str, Any]) -> str:
    counts = doc.get("counts", {})
    rows = [("description", sweep.spec.description), ("file", str(sweep.path)), ("status", doc.get("status")),
            ("points", counts.get("points")), ("ran now", counts.get("ran")), ("failed now", counts.get("failed")),
            ("left", counts.get("left")), ("wall (s)", _fmt(doc.get("wall_s"))),
            ("Ray", ", ".join(f"{k} {v}" for k, v in (doc.get("ray") or {}).items() if v is not None))]
    return _table(["", ""], [(k, "" if v is None else str(v)) for k, v in rows])


def _figure5_section(f: Figure5) -> str:
    split, curves = figure5_figures(f)
    optimum = [
        ("t* by the optimizer (every analytic row)", f"{f.optimizer_t:,.0f}"),
        ("t* as the grid's best Λ_max at the centre split", f"{f.best_t_on_grid:,.0f}"),
        ("t* where the two prefill limits cross (Eq. 7)", "none" if f.crossing_t is None else f"{f.crossing_t:,.0f}"),
        ("split N_p:N_d by the optimizer", f"{f.optimizer_split}:{f.optimizer_n_d}"),
        ("best N_p on the grid at the centre t", str(f.best_split)),
    ]
    below = f.below_saturation()
    note = (f"<p>Simulated points at {f.offered_rate_per_s:g} req/s. Below saturation they sit within "
            f"{below['deviation_mean_t'].abs().max():.1%} of the model evaluated with each request's own T_prefill "
            f"(dashed), and within {below['deviation'].abs().max():.1%} of Eq. 6 (solid), which takes T_prefill at "
            "each path's mean length: T_prefill is convex, so Eq. 6 reads high where the routed lengths spread "
            "across a kink of the profile.</p>") if not below.empty else ""
    deviations = [(p, f"{lvl:g}", f"{m:.3f}", f"{e:.3f}", f"{s:.3f}", f"{d:+.1%}", f"{de:+.1%}", "yes" if sat else "")
                  for p, frame in (("t", f.by_t), ("split", f.by_split))
                  for lvl, m, e, s, d, de, sat in zip(frame["level"], frame["model_lambda"], frame["mean_t_lambda"],
                                                      frame["sim_lambda"], frame["deviation"],
                                                      frame["deviation_mean_t"], frame["saturated"], strict=True)]
    return _section("The paper's Figure 5: model and simulation", (
        _table(["figure", "sweep"], optimum) + note + _figure(split) + _figure(curves)
        + _table(["panel", "level", "Λ_max Eq. 6", "Λ_max own T", "simulated", "vs Eq. 6", "vs own T", "saturated"],
                 deviations)))


def _crossover_section(c: Crossover) -> str:
    sentence = f"<p>{html.escape(crossover_sentence(c))}.</p>"
    return _section("Bandwidth crossover", sentence + _figure(crossover_figure(c)))


def _failures(rows: pd.DataFrame) -> str:
    failed = rows[rows["status"] != OK] if "status" in rows.columns else rows.iloc[0:0]
    if failed.empty:
        return "<p>none</p>"
    return _table(["point", "seed", "engine", "reason"],
                  [(r["point_id"], str(r["seed"]), str(r["engine"]), str(r["reason"])) for _, r in failed.iterrows()],
                  cls="fail")


def _figure(figure: go.Figure) -> str:
    return figure.to_html(full_html=False, include_plotlyjs=False)


def _section(title: str, body: str) -> str:
    return f"<section><h2>{html.escape(title)}</h2>\n{body}</section>\n"


def _table(header: list[str], rows: list[tuple[str, ...]], cls: str = "") -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(str(cell))}</td>" for cell in row) + "</tr>" for row in rows)
    return f"<table class='{cls}'><tr>{head}</tr>{body}</table>"


def _fmt(value: Any) -> str:
    return f"{value:.1f}" if isinstance(value, float) else "" if value is None else str(value)

