"""The Classroom's promises hold by construction where they can: the shares a step quotes come from
its scenario's length law, and the shipped seeds keep every run's share within SHARE_MARGIN of them
at any rate `auto` may choose; the checks read a real run's record and fail when it breaks them; the
stated times are the scenario's duration plus the measured start-up and drain."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from app.classroom_promises import (SHARE_MARGIN, SHORT_QUEUE, RunRecord, queue_peak, expected_share, first_run,
                                    link_then_threshold)
from app.classroom_times import Measured, load_measured, stated_s, words
from app.classroom_view import STEPS, stated_time_s, variant_scenario
from emulator.auto_rate import capacity_per_s, with_rate
from emulator.plane.control_plane import make_control_plane
from emulator.scenario import load_scenario
from emulator.virtual.engine import run_virtual
from emulator.workload.build import build_requests

SCENARIOS = Path(__file__).resolve().parents[2] / "scenarios"
RATES = np.linspace(0.25, 5.0, 40)  # requests/s: what `auto` may choose, a busy laptop to a fast one


def _arrivals(name: str) -> tuple[np.ndarray, np.ndarray]:
    """(arrival at 1 request/s, input length) of the scenario's first requests: at rate r a request
    arrives at arrival / r, with the same length (the seed fixes both streams)."""
    sc = with_rate(load_scenario(SCENARIOS / name), 1.0)
    sc = sc.model_copy(update={"duration_s": 400.0})
    requests = build_requests(sc)
    return np.array([r.arrival_s for r in requests]), np.array([r.input_len for r in requests])


def test_the_quickstart_sends_about_half_remote_at_any_rate() -> None:
    sc = load_scenario(SCENARIOS / "live-quickstart.yaml")
    t = float(sc.router.threshold_tokens)
    want = expected_share(sc, t)
    at_one, lengths = _arrivals("live-quickstart.yaml")
    for rate in RATES:
        shown = lengths[at_one / rate < sc.duration_s]
        if len(shown) >= 8:
            assert abs((shown > t).mean() - want) <= SHARE_MARGIN, (rate, (shown > t).mean(), want)


def test_classroom_basic_keeps_both_windows_at_any_rate() -> None:
    sc = load_scenario(SCENARIOS / "classroom-basic.yaml")
    at_s = next(e.at_s for e in sc.timeline if e.set)
    before_t, after_t = float(sc.router.threshold_tokens), 4096.0
    at_one, lengths = _arrivals("classroom-basic.yaml")
    for rate in RATES:
        arrive = at_one / rate
        before, after = lengths[arrive < at_s], lengths[(arrive >= at_s) & (arrive < sc.duration_s)]
        assert abs((before > before_t).mean() - expected_share(sc, before_t)) <= SHARE_MARGIN, rate
        assert abs((after > after_t).mean() - expected_share(sc, after_t)) <= SHARE_MARGIN, rate


@pytest.mark.parametrize("load", [0.6, 0.8])
def test_the_quickstarts_prefill_queues_stay_short_at_any_rate_auto_may_choose(tmp_path: Path, load: float) -> None:
    """At the rate `auto` chooses (0.6 of capacity) and at a machine a third slower than its start-up
    timing said (0.8), the first 160 requests (a fast machine's 45 s) never queue more than
    SHORT_QUEUE - 1: a live run keeps one of margin for its own jitter. A rate scales time alone, so
    the virtual engine at `load` of its own capacity stands for every machine."""
    sc = load_scenario(SCENARIOS / "live-quickstart.yaml")
    capacity = capacity_per_s(sc, make_control_plane(sc))
    rate = load * capacity
    sc = with_rate(sc, rate).model_copy(update={"duration_s": 160 / rate})
    run_virtual(sc, tmp_path)
    record = RunRecord.read(tmp_path, sc)
    assert len(record.requests) >= 140
    assert queue_peak(record) <= SHORT_QUEUE - 1, (load, queue_peak(record))


def test_the_checks_read_a_run_and_fail_a_broken_promise(tmp_path: Path) -> None:
    sc = load_scenario(SCENARIOS / "live-quickstart.yaml")
    run_virtual(sc, tmp_path)
    record = RunRecord.read(tmp_path, sc)
    assert [v.held for v in first_run(record)] == [True] * 4, first_run(record)
    all_local = dataclasses.replace(record, requests=record.requests.assign(route="local"))
    verdict = first_run(all_local)[0]
    assert not verdict.held and verdict.seen.startswith("0% of ")
    stuck = dataclasses.replace(record, timeseries=record.timeseries.assign(queue_local_prefill=9))
    assert not first_run(stuck)[3].held
    classroom = load_scenario(SCENARIOS / "classroom-basic.yaml")
    run_virtual(classroom, tmp_path / "classroom")
    verdicts = link_then_threshold(RunRecord.read(tmp_path / "classroom", classroom))
    assert all(v.held for v in verdicts), verdicts


def test_a_stated_time_is_the_scenarios_duration_between_measured_start_up_and_drain() -> None:
    measured = Measured(wall_s=80.0, startup_s=20.0, drain_s=10.0)
    assert stated_s(measured, "live", 45.0) == 75.0 and stated_s(measured, "virtual", 45.0) == 80.0
    assert stated_s(None, "live", 45.0) is None
    assert [words(s) for s in (None, 4.0, 71.0, 99.0, 130.0)] == [
        "not measured yet", "seconds", "about 75 s", "about 100 s", "about 2.5 min"]


def test_every_variant_is_measured_and_states_its_own_scenarios_time() -> None:
    measured = load_measured()
    for step in STEPS:
        for variant in step.variants:
            where = f"{step.title} / {variant.label}: run bench/classroom_steps.py"
            assert (step.title, variant.label) in measured, where
            got = measured[(step.title, variant.label)]
            if variant.engine == "live":
                duration = variant_scenario(step, variant).duration_s
                assert stated_time_s(step, variant, measured) == pytest.approx(got.startup_s + duration + got.drain_s)
            assert variant.promise is not None
