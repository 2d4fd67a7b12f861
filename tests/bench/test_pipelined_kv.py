"""bench/pipelined_kv.py's fits: the pipelined loss constant (rows whose means are the fluid's own
prediction at a known constant give that constant back, rows without loss none) and the spread of
a cache's loss-limited time."""

from __future__ import annotations

import math
import statistics
from dataclasses import replace

import pytest

from emulator.virtual.link_replay import pipelined_seconds
from tests.bench.scripts import load_bench


def test_the_pipelined_fit_recovers_the_constant_that_made_the_rows() -> None:
    state_of = load_bench("link_tcp").state_of
    fit_loss_c = load_bench("pipelined_kv").fit_loss_c
    layers = [74_818] * 3 + [1_310_786] + [74_818] * 3 + [1_310_786]  # kimi-linear-mini at 2,048 tokens
    rows = []
    for loss in (0.5, 1.0):
        point = {"bandwidth_mbit": 200, "delay_ms": 20, "loss_pct": loss}
        made = pipelined_seconds(replace(state_of(point), loss_c=1.3), sum(layers), 0.6,
                                 tuple(size / sum(layers) for size in layers))
        rows.append({**point, "kind": "prefill", "bytes": sum(layers), "layer_bytes": layers, "produce_s": 0.6,
                     "mean_s": made})
    assert fit_loss_c(rows, state_of) == pytest.approx(1.3)
    assert fit_loss_c([{**rows[0], "loss_pct": 0.0}], state_of) is None


def test_the_spread_fit_reads_each_rows_spread_against_the_loss_events_it_expects() -> None:
    # Times after a 0.5 s prefill with standard deviation 0.1 over mean 0.3 (spread 1/3); a 3.4 MB
    # cache at 1 % expects 3.78 loss events (0.01 x 3.4 MB / 9,000-byte packets): 1/3 x sqrt(3.78).
    # At 0.2 % it expects fewer than one, counted as one. Lossless rows and whole caches are left out.
    fit = load_bench("pipelined_kv").fit_loss_spread
    times = [0.5 + 0.3 + d for d in (-0.1, 0.1, -0.1, 0.1)]
    spread = statistics.stdev(times) / 0.3
    row = {"kind": "prefill", "loss_pct": 1.0, "bytes": 3.4e6, "produce_s": 0.5, "s": times}
    assert fit([row]) == pytest.approx(spread * math.sqrt(0.01 * 3.4e6 / 9000))
    assert fit([{**row, "loss_pct": 0.2}]) == pytest.approx(spread)
    assert fit([{**row, "loss_pct": 0.0}, {**row, "kind": "synthetic"}]) is None
