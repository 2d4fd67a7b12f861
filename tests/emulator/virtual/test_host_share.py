"""A profile's shared host and decode step by batch size on the virtual engine: every worker's time
is its table time times the host's slowdown for the workers busy as it starts (itself included), and
a decode request's step is the batch table's at the size it joins, times the context factor at the
batch's mean prompt length. Numbers computed by hand."""

from __future__ import annotations

import copy
import math
from pathlib import Path
from typing import Any

import pytest

from emulator.control.profiles import PiecewiseLinear
from emulator.control.types import RequestSpec
from emulator.errors import ScenarioError
from emulator.plane import make_control_plane
from emulator.scenario import parse_scenario
from emulator.virtual.costs import CostModel
from emulator.virtual.engine import simulate

HOST = {"cores": 1, "busy_slowdown": [1.0, 1.5, 2.0]}
BOX: dict[str, Any] = {
    "name": "box", "engine": "virtual", "duration_s": 10,
    "model": {"profile": {
        "name": "box", "lengths_tokens": [1000, 4000], "kv_mib": [1.0, 4.0], "prefill_s": {"cpu": [1.0, 4.0]},
        "decode_step_ms": {"cpu": 80.0}, "decode_batch_sizes": [1, 2, 4],
        "decode_step_ms_by_batch": {"cpu": [20.0, 40.0, 80.0]}, "host": HOST}},
    "clusters": {"remote": {"instances": 1, "device": "cpu"},
                 "local": {"instances": 2, "device": "cpu", "prefill_instances": 1, "decode_max_batch": 4}},
    "link": {"bandwidth_mbit": 100000, "delay_ms": 0},
    "router": {"policy": "prfaas", "threshold_tokens": 2048},
    "scheduler": {"short_term": {"enabled": False}, "long_term": {"enabled": False}},
    "workload": {"arrival": {"kind": "poisson", "rate_per_s": 1.0},
                 "input_len": {"kind": "uniform", "min": 1000, "max": 4000},
                 "output_len": {"kind": "fixed", "tokens": 8}},
}


def run(requests: list[RequestSpec], **profile: Any) -> dict[str, Any]:
    doc = copy.deepcopy(BOX)
    for key, value in profile.items():
        if value is None:
            del doc["model"]["profile"][key]
        else:
            doc["model"]["profile"][key] = value
    result = simulate(parse_scenario(doc, Path.cwd()), requests=requests)
    return {r.id: r for r in result.records}


def test_two_overlapping_prefills_take_their_table_time_times_the_slowdown_when_each_starts() -> None:
    """a (4,000 tokens) goes remote and starts alone: 4.0 s x 1.0. b (1,000 tokens) starts on the
    local prefill at the same moment with a busy: 1.0 s x busy_slowdown[2 - 1] = 1.5 s."""
    records = run([RequestSpec("a", 0.0, 4000, 1), RequestSpec("b", 0.0, 1000, 1)])
    a, b = records["a"], records["b"]
    assert (a.route, b.route) == ("prfaas", "local")
    assert (a.prefill_start_s, a.prefill_end_s) == (0.0, 4.0)
    assert (b.prefill_start_s, b.prefill_end_s) == (0.0, 1.5)


def test_the_hosts_compute_factor_multiplies_every_charge_and_not_the_schedulers_model() -> None:
    """As the first test, on a host 25 % slower than the tables: a 4.0 s x 1.25, b 1.0 s x 1.5 x
    1.25; the routes stay (the run core's board reads the tables), and the scheduler, fed those
    prefills, reads the remote cluster at x0.8 the profile's speed and the local one at x0.8 / 1.5
    (b shared the host), as a live scheduler reads a slower machine than its profile."""
    doc = copy.deepcopy(BOX)
    doc["model"]["profile"]["host"] = {**HOST, "compute_factor": 1.25}
    doc["scheduler"] = {"short_term": {"enabled": True, "interval_s": 1}, "long_term": {"enabled": False}}
    requests = [RequestSpec("a", 0.0, 4000, 1), RequestSpec("b", 0.0, 1000, 1)]
    result = simulate(parse_scenario(doc, Path.cwd()), requests=requests)
    a, b = sorted(result.records, key=lambda r: r.id)
    assert (a.route, b.route) == ("prfaas", "local")
    assert (a.prefill_end_s, b.prefill_end_s) == (pytest.approx(5.0), pytest.approx(1.875))
    scheduler = result.gateway.core.scheduler
    assert scheduler is not None
    assert (scheduler.estimates.speed_remote, scheduler.estimates.speed_local) == (pytest.approx(0.8), pytest.approx(0.8 / 1.5))
    assert result.plane.inputs.prefill_local_s.at(1000.0) == pytest.approx(1.0)  # the model keeps the table


def test_a_decode_step_on_a_slower_host_is_the_batch_tables_times_its_compute_factor() -> None:
    records = run([RequestSpec("r1", 0.0, 1000, 101), RequestSpec("r2", 0.0, 1000, 101)],
                  host={**HOST, "compute_factor": 0.5})
    assert (records["r1"].prefill_end_s, records["r2"].prefill_end_s) == (0.5, 1.0)
    assert records["r1"].tpot_s == pytest.approx(0.020 * 1.5 * 0.5, rel=1e-12)
    assert records["r2"].tpot_s == pytest.approx(0.040 * 0.5, rel=1e-12)


def test_without_a_host_the_same_prefills_take_their_table_time() -> None:
    records = run([RequestSpec("a", 0.0, 4000, 1), RequestSpec("b", 0.0, 1000, 1)], host=None)
    assert (records["a"].prefill_end_s, records["b"].prefill_end_s) == (4.0, 1.0)


def test_a_decode_step_is_the_batch_tables_at_the_size_it_joins_times_the_hosts_share() -> None:
    """r1 and r2 prefill locally one after the other (1.0 s each). r1 joins decode at ~1.0 s, while
    r2 prefills: batch 1, 2 workers busy, 20 ms x 1.5. r2 joins at ~2.0 s beside r1 (its 100 steps
    last 3 s) with the prefill node idle: batch 2, 1 worker busy, 40 ms x 1.0."""
    records = run([RequestSpec("r1", 0.0, 1000, 101), RequestSpec("r2", 0.0, 1000, 101)])
    r1, r2 = records["r1"], records["r2"]
    # r2 started with r1 not yet in decode (its KV still on the local RDMA): 1 worker busy
    assert (r1.prefill_end_s, r2.prefill_start_s, r2.prefill_end_s) == (1.0, 1.0, 2.0)
    assert r1.tpot_s == pytest.approx(0.020 * 1.5, rel=1e-12)
    assert r2.tpot_s == pytest.approx(0.040, rel=1e-12)
    assert r1.finish_s - r1.first_token_s == pytest.approx(100 * 0.020 * 1.5, rel=1e-12)
    assert r2.finish_s - r2.first_token_s == pytest.approx(100 * 0.040, rel=1e-12)


def test_without_a_host_the_batch_table_alone_sets_the_step() -> None:
    records = run([RequestSpec("r1", 0.0, 1000, 101), RequestSpec("r2", 0.0, 1000, 101)], host=None)
    assert (records["r1"].tpot_s, records["r2"].tpot_s) == (0.020, 0.040)


def test_without_either_every_batch_takes_t_decode() -> None:
    records = run([RequestSpec("r1", 0.0, 1000, 101), RequestSpec("r2", 0.0, 1000, 101)], host=None,
                  decode_batch_sizes=None, decode_step_ms_by_batch=None)
    assert (records["r1"].tpot_s, records["r2"].tpot_s) == (0.080, 0.080)


@pytest.mark.parametrize(("table", "cores", "num_busy", "factor"), [
    ((), 0, 5, 1.0),  # no host: never slowed
    ((1.0, 1.05, 1.75), 2, 1, 1.0),
    ((1.0, 1.05, 1.75), 2, 3, 1.75),
    ((1.0, 1.05, 1.75), 2, 6, 3.5),  # past the table: the last factor x 6 / 3
    ((1.0, 1.0), 16, 8, 1.0),  # past the table but within the cores: no worse than its last factor
    ((1.0, 1.0), 16, 32, 2.0),  # 32 workers on 16 cores
])
def test_the_slowdown_table_and_beyond_it(table: tuple[float, ...], cores: int, num_busy: int, factor: float) -> None:
    plane = make_control_plane(parse_scenario(BOX, Path.cwd()))
    costs = CostModel.from_inputs(plane.inputs, "box", busy_slowdown=table, host_cores=cores)
    assert costs.slowdown(num_busy) == factor


def test_the_batch_curve_interpolates_between_sizes() -> None:
    plane = make_control_plane(parse_scenario(BOX, Path.cwd()))
    table = PiecewiseLinear((1.0, 2.0, 4.0), (0.02, 0.04, 0.08))
    costs = CostModel.from_inputs(plane.inputs, "box", decode_batch=table)
    assert [costs.decode_step_at(n, 1000.0) for n in (1, 2, 3, 4)] == [0.02, 0.04, 0.06, 0.08]
    assert costs.is_timed_by_batch and not CostModel.from_inputs(plane.inputs, "box").is_timed_by_batch


def test_a_request_joining_a_stepping_batch_waits_for_the_step_in_progress() -> None:
    """As the live decode role: r1 starts a run of 20 ms steps when it joins (no host here); r2's
    KV arrives 1.01 s later (1,010 tokens), mid-step, and its first token comes at the next step
    boundary of r1's clock, not at once. r1, joining an idle node, gets its first token as its KV
    arrives."""
    records = run([RequestSpec("r1", 0.0, 1000, 101), RequestSpec("r2", 0.0, 1010, 101)], host=None)
    r1, r2 = records["r1"], records["r2"]
    assert r1.first_token_s == pytest.approx(r1.transfer_end_s, abs=1e-12)
    boundary = r1.first_token_s + math.ceil((r2.transfer_end_s - r1.first_token_s) / 0.020) * 0.020
    assert r2.first_token_s == pytest.approx(boundary, abs=1e-9)
    assert r2.first_token_s - r2.transfer_end_s == pytest.approx(0.010, abs=1e-6)  # half of r1's step left


CONTEXT = {"decode_context_tokens": [500, 1000, 3000], "decode_context_factor": [0.5, 1.0, 2.0]}


def test_a_decode_step_scales_with_the_batch_s_mean_prompt_length() -> None:
    """Alone in its batch (no host), a 1,000-token prompt decodes at the table's 20 ms; a 2,000-token
    one at 20 ms x 1.5 (halfway from 1,000 to 3,000); joining the first (which decodes 200 steps) as
    its prefill ends at 3 s, the batch of two at their mean 1,500 tokens: 40 ms x 1.25."""
    alone = run([RequestSpec("short", 0.0, 1000, 11)], host=None, **CONTEXT)["short"]
    assert alone.tpot_s == pytest.approx(0.020, rel=1e-12)
    long_alone = run([RequestSpec("long", 0.0, 2000, 11)], host=None, **CONTEXT)["long"]
    assert long_alone.tpot_s == pytest.approx(0.030, rel=1e-12)
    records = run([RequestSpec("r1", 0.0, 1000, 201), RequestSpec("r2", 0.0, 2000, 101)], host=None, **CONTEXT)
    assert (records["r1"].route, records["r2"].route) == ("local", "local")
    assert records["r2"].tpot_s == pytest.approx(0.040 * 1.25, rel=1e-12)


def test_a_context_table_without_its_other_half_or_out_of_order_is_refused() -> None:
    doc = copy.deepcopy(BOX)
    doc["model"]["profile"]["decode_context_tokens"] = [500, 1000]
    with pytest.raises(ScenarioError, match=r"decode_context_tokens: given without decode_context_factor"):
        parse_scenario(doc, Path.cwd())
    doc["model"]["profile"].update(decode_context_tokens=[1000, 500], decode_context_factor=[1.0, 0.5, 2.0])
    with pytest.raises(ScenarioError, match=r"decode_context_tokens: \[1000, 500\] is not 2 or more strictly "
                                            r"increasing(.|\n)*decode_context_factor: 3 values for 2 lengths"):
        parse_scenario(doc, Path.cwd())
