"""bench/pipelined_kv.py's fit of the pipelined loss constant: rows whose means are the fluid's
own prediction at a known constant give that constant back, and rows without loss give none."""

from __future__ import annotations

from dataclasses import replace

from emulator.virtual.link_replay import pipelined_seconds
from tests.bench.scripts import load_bench


def test_the_pipelined_fit_recovers_the_constant_that_made_the_rows() -> None:
    state_of = load_bench("link_tcp").state_of
    fit_loss_c = load_bench("pipelined_kv").fit_loss_c
    rows = []
    for loss in (0.5, 1.0):
        point = {"bandwidth_mbit": 200, "delay_ms": 20, "loss_pct": loss}
        made = pipelined_seconds(replace(state_of(point), loss_c=8.0), 3_070_480, 0.6, 0.427)
        rows.append({**point, "kind": "prefill", "bytes": 3_070_480, "tail_bytes": 1_311_094, "produce_s": 0.6,
                     "mean_s": made})
    assert fit_loss_c(rows, state_of) == 8.0
    assert fit_loss_c([{**rows[0], "loss_pct": 0.0}], state_of) is None
