"""The inline SVG step chart compare.html draws its TTFT CDFs with."""

from __future__ import annotations

import numpy as np
import pytest

from emulator.telemetry.svg_chart import MAX_POINTS, StepLine, nice_ticks, step_chart_svg


@pytest.mark.parametrize(("low", "high", "ticks"), [
    (0.0, 1.0, [0.0, 0.2, 0.4, 0.6, 0.8, 1.0]), (0.0, 11.9, [0.0, 5.0, 10.0]),
    (0.0, 40.0, [0.0, 10.0, 20.0, 30.0, 40.0]),
    (0.0, 0.003, [0.0, 0.001, 0.002, 0.003]), (1.0, 1.0, [1.0]),
])
def test_ticks_are_round(low: float, high: float, ticks: list[float]) -> None:
    assert nice_ticks(low, high) == pytest.approx(ticks)


def test_each_line_is_one_path_with_its_colour_and_an_escaped_legend() -> None:
    big = np.sort(np.random.default_rng(0).exponential(size=50_000))
    lines = [StepLine("<a & b>", "#1b9e77", np.array([1.0, 2.0]), np.array([0.5, 1.0])),
             StepLine("many", "#d95f02", big, np.arange(1, big.size + 1) / big.size)]
    svg = step_chart_svg(lines, "TTFT (s)", "fraction")
    assert svg.count("<path ") == 2 and "stroke='#1b9e77'" in svg and "&lt;a &amp; b&gt;" in svg
    assert svg.count("H") <= 2 + MAX_POINTS + 2 and len(svg) < 120_000  # 50,000 requests, thinned
