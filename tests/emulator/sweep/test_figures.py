"""A sweep's figures from its rows: seeds folded into mean and band, the Pareto front."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from emulator.sweep.figures import heatmap_figure, lines_figure, over_seeds, pareto_figure, pareto_mask


def _rows() -> pd.DataFrame:
    """t x rate, two seeds; throughput = rate, TTFT P90 grows with rate / t; one failed point."""
    rows = [{"router.threshold_tokens": t, "workload.arrival.rate_per_s": r, "seed": s, "status": "ok",
             "throughput_rps": float(r), "ttft_p90_s": r / t * 1000 + s, "egress_gbps_mean": 1.5 * r}
            for t in (4096, 8192) for r in (1, 2, 3) for s in (0, 1)]
    rows.append({"router.threshold_tokens": 4096, "workload.arrival.rate_per_s": 9, "seed": 0, "status": "failed",
                 "throughput_rps": None, "ttft_p90_s": None, "egress_gbps_mean": None})
    return pd.DataFrame(rows)


def test_seeds_fold_into_mean_low_high_and_failed_points_are_left_out() -> None:
    stats = over_seeds(_rows(), ("workload.arrival.rate_per_s",), "ttft_p90_s")
    assert stats["workload.arrival.rate_per_s"].tolist() == [1, 2, 3]  # the failed rate 9 is not there
    first = stats.iloc[0]
    expected = [1 / 4096 * 1000, 1 / 4096 * 1000 + 1, 1 / 8192 * 1000, 1 / 8192 * 1000 + 1]
    assert first["mean"] == pytest.approx(np.mean(expected)) and first["seeds"] == 4
    assert (first["low"], first["high"]) == pytest.approx((min(expected), max(expected)))


def test_heatmap_is_the_mean_over_seeds_on_the_axis_grid() -> None:
    heat = heatmap_figure(_rows(), "workload.arrival.rate_per_s", "router.threshold_tokens", "ttft_p90_s").data[0]
    assert list(heat.x) == ["1", "2", "3"] and list(heat.y) == ["4096", "8192"]
    floats = _rows().astype({"router.threshold_tokens": float})  # numeric axes are stored as floats
    assert list(heatmap_figure(floats, "workload.arrival.rate_per_s", "router.threshold_tokens",
                               "ttft_p90_s").data[0].y) == ["4096", "8192"]
    layout = heatmap_figure(_rows(), "workload.arrival.rate_per_s", "router.threshold_tokens", "ttft_p90_s").layout
    assert (layout.xaxis.title.text, layout.yaxis.title.text) == ("arrival rate (req/s)", "threshold t (tokens)")
    z = np.array(heat.z, dtype=float)
    assert z[0, 1] == pytest.approx(2 / 4096 * 1000 + 0.5) and z[1, 2] == pytest.approx(3 / 8192 * 1000 + 0.5)


def test_lines_have_one_mean_line_and_one_band_per_value() -> None:
    fig = lines_figure(_rows(), "workload.arrival.rate_per_s", "ttft_p90_s", by="router.threshold_tokens")
    names = [t.name for t in fig.data if t.showlegend is not False]
    assert names == ["threshold t (tokens) = 4096", "threshold t (tokens) = 8192"]  # named, not keys
    assert fig.layout.xaxis.title.text == "arrival rate (req/s)" and fig.layout.yaxis.title.text == "TTFT P90 (s)"
    band = fig.data[0]
    assert band.fill == "toself" and len(band.x) == 6  # up the highs, back down the lows


def test_pareto_front_keeps_the_points_nothing_beats() -> None:
    throughput = np.array([1.0, 2.0, 2.0, 3.0, 1.5])
    latency = np.array([1.0, 2.0, 3.0, 5.0, 4.0])
    assert pareto_mask(throughput, latency).tolist() == [True, True, False, True, False]


def test_pareto_figure_draws_the_front_through_the_best_points() -> None:
    fig = pareto_figure(_rows(), hover=("router.threshold_tokens", "workload.arrival.rate_per_s"))
    points, front = fig.data
    assert len(points.x) == 12  # every successful point and seed
    assert list(front.x) == sorted(front.x) and len(front.x) >= 3
    assert points.marker.colorbar.title.text == "egress (Gbit/s)"
    assert sorted(set(points.marker.color)) == [1.5, 3.0, 4.5]  # coloured by the kept egress, in Gbit/s


@pytest.mark.parametrize(("column", "per_point", "unit", "top"), [
    ("egress_gbps_mean", 1.5e-3, "Mbit/s", 4.5),  # a Mbit/s link: 1.5-4.5 Mbit/s, not 0.0045 Gbit/s
    ("egress_bit_per_s_mean", 1.5e6, "Mbit/s", 4.5),
    ("egress_bit_per_s_mean", 1.5e9, "Gbit/s", 4.5),
])
def test_pareto_colour_bar_is_in_the_unit_of_the_egress(column: str, per_point: float, unit: str,
                                                        top: float) -> None:
    rows = _rows().drop(columns="egress_gbps_mean")
    rows[column] = rows["workload.arrival.rate_per_s"] * per_point
    points = pareto_figure(rows).data[0]
    assert points.marker.colorbar.title.text == f"egress ({unit})"
    assert max(points.marker.color) == pytest.approx(top)
