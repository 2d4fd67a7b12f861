"""bench/pipelined_kv.py's fit of the pipelined loss constant: rows whose means are the fluid's
own prediction at a known constant give that constant back, and rows without loss give none."""

from __future__ import annotations

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
