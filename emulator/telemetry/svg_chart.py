"""A step chart as inline SVG: the lines of a few runs on shared axes, with ticks and a legend.

`compare` writes its TTFT CDFs this way, so compare.html opens offline at a few kilobytes instead
of carrying plotly.js (4.8 MB) for one chart. Pure: numbers in, markup out.
"""

from __future__ import annotations

import html
import math
from collections.abc import Sequence
from dataclasses import dataclass

MAX_POINTS = 2000  # per line: a CDF of more requests is drawn through evenly spaced quantiles
MARGIN = {"left": 64, "right": 24, "top": 24, "bottom": 56}
LEGEND_ROW_PX = 20


@dataclass(frozen=True, slots=True)
class StepLine:
    """One line: its name, colour and points (x ascending), drawn as steps (each y holds until the
    next x)."""

    name: str
    color: str
    xs: Sequence[float]
    ys: Sequence[float]


def nice_ticks(low: float, high: float, count: int = 6) -> list[float]:
    """About `count` round ticks (1, 2 or 5 times a power of ten apart) from `low` to `high`."""
    if not (math.isfinite(low) and math.isfinite(high)) or high <= low:
        return [low]
    raw = (high - low) / max(count - 1, 1)
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 5, 10) if m * power >= raw)
    first = math.ceil(low / step) * step
    return [round(first + i * step, 12) for i in range(int((high - first) / step + 1e-9) + 1)]


def _thin(line: StepLine) -> tuple[list[float], list[float]]:
    """At most MAX_POINTS evenly spaced points of the line, its first and last among them."""
    size = len(line.xs)
    keep = range(size) if size <= MAX_POINTS else sorted({round(i * (size - 1) / (MAX_POINTS - 1))
                                                          for i in range(MAX_POINTS)})
    return [float(line.xs[i]) for i in keep], [float(line.ys[i]) for i in keep]


def step_chart_svg(lines: Sequence[StepLine], x_title: str, y_title: str, *, width: int = 760,
                   height: int = 420, y_max: float = 1.0) -> str:
    """The lines on one chart from x = 0 and y = 0 to their largest x and `y_max`, legend above."""
    legend_px = LEGEND_ROW_PX * len(lines)
    top = MARGIN["top"] + legend_px
    plot_w, plot_h = width - MARGIN["left"] - MARGIN["right"], height - top - MARGIN["bottom"]
    x_max = max((float(max(line.xs)) for line in lines if len(line.xs)), default=1.0) or 1.0
    x_ticks = nice_ticks(0.0, x_max)
    x_max = max(x_max, x_ticks[-1])

    def px(x: float) -> float:
        return MARGIN["left"] + plot_w * x / x_max

    def py(y: float) -> float:
        return top + plot_h * (1 - y / y_max)

    parts = [f"<svg xmlns='http://www.w3.org/2000/svg' width='{width}' height='{height}' "
             f"font-family='system-ui, sans-serif' font-size='12'>"]
    for x in x_ticks:
        parts.append(f"<line x1='{px(x):.1f}' y1='{top}' x2='{px(x):.1f}' y2='{top + plot_h}' stroke='#eee'/>"
                     f"<text x='{px(x):.1f}' y='{top + plot_h + 16}' text-anchor='middle'>{x:g}</text>")
    for y in nice_ticks(0.0, y_max):
        parts.append(f"<line x1='{MARGIN['left']}' y1='{py(y):.1f}' x2='{MARGIN['left'] + plot_w}' "
                     f"y2='{py(y):.1f}' stroke='#eee'/><text x='{MARGIN['left'] - 6}' y='{py(y) + 4:.1f}' "
                     f"text-anchor='end'>{y:g}</text>")
    parts.append(f"<text x='{MARGIN['left'] + plot_w / 2:.0f}' y='{height - 12}' text-anchor='middle'>"
                 f"{html.escape(x_title)}</text><text transform='translate(16 {top + plot_h / 2:.0f}) rotate(-90)' "
                 f"text-anchor='middle'>{html.escape(y_title)}</text>")
    for row, line in enumerate(lines):
        xs, ys = _thin(line)
        path = "".join(f"H{px(x):.1f}V{py(y):.1f}" for x, y in zip(xs, ys, strict=True))
        parts.append(f"<path d='M{px(0.0):.1f} {py(0.0):.1f}{path}' fill='none' stroke='{line.color}' "
                     f"stroke-width='2'/>")
        y = MARGIN["top"] + row * LEGEND_ROW_PX
        parts.append(f"<rect x='{MARGIN['left']}' y='{y - 10}' width='18' height='4' fill='{line.color}'/>"
                     f"<text x='{MARGIN['left'] + 26}' y='{y}'>{html.escape(line.name)}</text>")
    parts.append("</svg>")
    return "".join(parts)
