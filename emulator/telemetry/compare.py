"""Two recorded runs side by side (live vs virtual, or two settings of one engine): headline numbers
with relative differences (TTFT with and without queueing, offloaded share, prefix hits, egress in
the link's unit), failures lined up by reason, the per-node figures, and a self-contained HTML page
of both TTFT CDFs (an inline SVG chart: a few kilobytes, opens offline).

Runs are named by what tells them apart (telemetry.run_names), and the table fits the terminal's
width. Reads run directories through telemetry's `load_run`; it runs nothing and computes no new
metrics.
"""

from __future__ import annotations

import html
import shutil
import textwrap
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from emulator.control.types import FailReason, RequestStatus
from emulator.telemetry.figures import (
    EGRESS_KEY,
    HEADLINE,
    NOQUEUE_NOTE,
    NodeFigures,
    egress_bit_per_s,
    egress_label,
    format_node,
    node_figures,
    number,
    rate_label,
)
from emulator.telemetry.labels import format_number
from emulator.telemetry.palette import run_color
from emulator.telemetry.recorder import load_run
from emulator.telemetry.run_names import run_names
from emulator.telemetry.svg_chart import StepLine, step_chart_svg

LABEL_WIDTH = 28
VALUE_WIDTH = 10  # a figure's column at its narrowest: `12,345,678`, `0.00338`


@dataclass(frozen=True, slots=True)
class MetricDiff:
    """One figure of both runs, as recorded; `per_unit` divides them for display only."""

    name: str
    label: str
    a: float | None
    b: float | None
    per_unit: float = 1.0

    @property
    def difference(self) -> float | None:
        """b - a, as recorded; None when either is missing."""
        return None if self.a is None or self.b is None else self.b - self.a

    @property
    def relative(self) -> float | None:
        """(b - a) / a; None when either is missing or a is 0."""
        if self.a is None or self.b is None or self.a == 0:
            return None
        return self.b / self.a - 1


@dataclass(frozen=True, slots=True)
class FailureCounts:
    """Failed requests with one reason (a FailReason value) in each run."""

    reason: str
    a: int
    b: int


@dataclass(frozen=True, slots=True)
class NodeDiff:
    """One node's figures in each run (None where that run has no such node)."""

    node: str
    a: NodeFigures | None
    b: NodeFigures | None


@dataclass(frozen=True, slots=True)
class Comparison:
    label_a: str  # each run's name by what tells it apart from the other (run_names)
    label_b: str
    rows: tuple[MetricDiff, ...]
    ttft_a: np.ndarray  # sorted TTFTs of completed requests
    ttft_b: np.ndarray
    failures: tuple[FailureCounts, ...] = ()  # every reason either run met, in FailReason's order
    nodes: tuple[NodeDiff, ...] = ()  # prefill nodes then decode nodes, either run's
    dir_a: str = ""  # the run directories as given
    dir_b: str = ""

    def row(self, name: str) -> MetricDiff:
        return next(r for r in self.rows if r.name == name)


def compare_runs(run_a: str | Path, run_b: str | Path) -> Comparison:
    """Load both runs (TelemetryError if either is not a recorded run) and line up their numbers."""
    req_a, _, doc_a = load_run(run_a)
    req_b, _, doc_b = load_run(run_b)
    sum_a, sum_b = _summary(doc_a), _summary(doc_b)
    rows = tuple(MetricDiff(name, label, number(sum_a, name), number(sum_b, name)) for name, label in HEADLINE)
    egress = (egress_bit_per_s(sum_a), egress_bit_per_s(sum_b))
    unit, per_unit = rate_label(egress)
    rows += (MetricDiff(EGRESS_KEY, egress_label(unit), *egress, per_unit=per_unit),)
    failures = line_up_failures(summary_failures(doc_a), summary_failures(doc_b))
    name_a, name_b = run_names([_meta(doc_a), _meta(doc_b)], [Path(run_a).resolve().name, Path(run_b).resolve().name])
    return Comparison(name_a, name_b, rows, _ttfts(req_a), _ttfts(req_b), failures,
                      line_up_nodes(node_figures(sum_a), node_figures(sum_b)), str(run_a), str(run_b))


def default_out(run_a: str | Path, run_b: str | Path) -> Path:
    """Where the page goes unless told: beside the first run, named after both folders."""
    a, b = Path(run_a).resolve(), Path(run_b).resolve()
    return a.parent / f"compare-{a.name}-vs-{b.name}.html"


def line_up_nodes(a: tuple[NodeFigures, ...], b: tuple[NodeFigures, ...]) -> tuple[NodeDiff, ...]:
    """One row per node either run names, A's order first (prefill nodes, then decode nodes)."""
    by_a = {(n.role, n.node): n for n in a}
    by_b = {(n.role, n.node): n for n in b}
    keys = list(dict.fromkeys([*by_a, *by_b]))
    keys.sort(key=lambda key: key[0] != "prefill")  # stable: prefill before decode, in listed order
    return tuple(NodeDiff(node, by_a.get((role, node)), by_b.get((role, node))) for role, node in keys)


def line_up_failures(a: dict[str, int], b: dict[str, int]) -> tuple[FailureCounts, ...]:
    """One row per reason either run met, in `reason_order`."""
    return tuple(FailureCounts(r, a.get(r, 0), b.get(r, 0)) for r in reason_order([*a, *b]))


def reason_order(reasons: Iterable[str]) -> list[str]:
    """The distinct `reasons` in FailReason's order, then those outside it (runs recorded before the
    enum, whose live reasons were sentences) in alphabetical order."""
    met, known = set(reasons), [r.value for r in FailReason]
    return [r for r in known if r in met] + sorted(met - set(known))


def format_table(comparison: Comparison, width: int | None = None) -> str:
    """A plain-text table that fits `width` columns (default: the terminal's): which run is A and
    which B, then metric, A, B and the relative difference of B against A, the columns headed by
    the runs' names when they fit and by A and B when not; then failures by reason, the per-node
    figures, and the note on TTFT without queueing."""
    width = width or shutil.get_terminal_size().columns
    names = (comparison.label_a, comparison.label_b)
    lines = []
    for letter, name, where in zip("AB", names, (comparison.dir_a, comparison.dir_b), strict=True):
        one = f"{letter}: {name} ({where})"  # a path is never cut: it takes its own line if need be
        lines += [one] if len(one) <= width else [textwrap.fill(f"{letter}: {name}", width), f"   {where}"]
    cell = max(VALUE_WIDTH, *(len(name) for name in names))
    heads = names if LABEL_WIDTH + 2 * (cell + 2) + 10 <= width else ("A", "B")
    cell = max(VALUE_WIDTH, *(len(head) for head in heads))
    head = f"{'metric':<{LABEL_WIDTH}}  {heads[0]:>{cell}}  {heads[1]:>{cell}}  {'B vs A':>8}"
    lines += ["", head, "-" * len(head)]
    for row in comparison.rows:
        rel = "" if row.relative is None else f"{row.relative:+.1%}"
        a, b = (None if v is None else v / row.per_unit for v in (row.a, row.b))
        lines.append(f"{row.label:<{LABEL_WIDTH}}  {format_number(a):>{cell}}  {format_number(b):>{cell}}  {rel:>8}")
    lines.append(f"{'failed, by reason':<{LABEL_WIDTH}}  {'A':>{cell}}  {'B':>{cell}}  {'B - A':>8}")
    for fail in comparison.failures:
        reason = "  " + fail.reason[:LABEL_WIDTH - 2]
        lines.append(f"{reason:<{LABEL_WIDTH}}  {fail.a:>{cell}}  {fail.b:>{cell}}  {fail.b - fail.a:>+8}")
    if not comparison.failures:
        lines.append(f"{'  (none)':<{LABEL_WIDTH}}  {0:>{cell}}  {0:>{cell}}  {'':>8}")
    lines += _node_lines(comparison.nodes, width)
    lines.append(textwrap.fill(NOQUEUE_NOTE, width))
    return "\n".join(lines)


def _node_lines(nodes: tuple[NodeDiff, ...], width: int) -> list[str]:
    """Per node: requests served, and a prefill node's busy fraction and mean queue, A then B: side
    by side where both fit the width, else A's line and B's line under the node's name."""
    if not nodes:
        return [f"{'per node':<{LABEL_WIDTH}}  (not in these summaries: recorded before per-node figures)"]
    cells = [(format_node(n.a), format_node(n.b)) for n in nodes]
    cell = max(len(text) for pair in cells for text in pair)
    if LABEL_WIDTH + 2 * (cell + 2) <= width:
        lines = [f"{'per node':<{LABEL_WIDTH}}  {'A':>{cell}}  {'B':>{cell}}"]
        for node, (a, b) in zip(nodes, cells, strict=True):
            lines.append(f"{'  ' + node.node[:LABEL_WIDTH - 2]:<{LABEL_WIDTH}}  {a:>{cell}}  {b:>{cell}}")
        return lines
    lines = ["per node (A, then B)"]
    for node, (a, b) in zip(nodes, cells, strict=True):
        lines += [f"  {node.node}", f"    A  {a}", f"    B  {b}"]
    return lines


def write_cdf_html(comparison: Comparison, path: str | Path) -> Path:
    """The table and both TTFT CDFs (an inline SVG chart, in the runs' colours) as one page that
    opens offline; a few kilobytes."""
    lines = [StepLine(name, run_color(i), ttfts, np.arange(1, ttfts.size + 1) / max(ttfts.size, 1))
             for i, (name, ttfts) in enumerate(((comparison.label_a, comparison.ttft_a),
                                                 (comparison.label_b, comparison.ttft_b)))]
    chart = step_chart_svg(lines, "TTFT (s)", "fraction of completed requests")
    title = html.escape(f"{comparison.label_a} vs {comparison.label_b}")
    table = html.escape(format_table(comparison, width=120))
    page = (f"<!DOCTYPE html>\n<html><head><meta charset='utf-8'><title>{title}</title></head>\n"
            f"<body style='font-family: system-ui, sans-serif'><h1>{title}</h1>\n<pre>{table}</pre>\n"
            f"<h2>TTFT CDF</h2>\n{chart}\n</body></html>\n")
    path = Path(path)
    path.write_text(page, encoding="utf-8")
    return path


def _meta(doc: dict) -> dict:
    meta = doc.get("meta")
    return meta if isinstance(meta, dict) else {}


def summary_failures(doc: dict) -> dict[str, int]:
    """summary.json's failures by reason (`fail_reasons` in runs recorded before `failed_by_reason`)."""
    summary = doc.get("summary", {})
    counts = summary.get("failed_by_reason", summary.get("fail_reasons"))
    if not isinstance(counts, dict):
        return {}
    return {str(k): int(v) for k, v in counts.items() if isinstance(v, int) and not isinstance(v, bool)}


def _summary(doc: dict) -> dict:
    summary = doc.get("summary")
    return summary if isinstance(summary, dict) else {}


def _ttfts(requests: pd.DataFrame) -> np.ndarray:
    done = requests[(requests["status"] == RequestStatus.COMPLETED.value) & requests["ttft_s"].notna()]
    return np.sort(done["ttft_s"].to_numpy(dtype=float))

