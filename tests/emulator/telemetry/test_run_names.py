"""Runs named by what tells them apart (scenario, engine, model, then the settings they ran with)."""

from __future__ import annotations

from emulator.telemetry.palette import ROUTE_COLORS, RUN_COLORS, run_color
from emulator.telemetry.run_names import run_names

BASE = {"scenario": "live-dense-vs-hybrid", "engine": "virtual", "model": "dense-gqa-mini (small)",
        "policy": "prfaas", "link": {"bandwidth_mbit": 50, "delay_ms": 10}, "threshold_start": 2048,
        "n_p_start": 1, "scheduler": {"short_term": False, "long_term": False}, "seed": 0}


def test_classroom_step_two_dense_and_hybrid_are_told_apart() -> None:
    hybrid = {**BASE, "model": "kimi-linear-mini (small)"}
    live = {**BASE, "engine": "live"}
    assert run_names([BASE, hybrid], ["d", "h"]) == ["dense-gqa-mini (small)", "kimi-linear-mini (small)"]
    assert run_names([BASE, hybrid, live], ["d", "h", "l"]) == [
        "virtual · dense-gqa-mini (small)", "virtual · kimi-linear-mini (small)", "live · dense-gqa-mini (small)"]


def test_the_scenario_comes_first_and_only_what_helps_is_added() -> None:
    other = {**BASE, "scenario": "live-bandwidth-drop", "model": "kimi-linear-mini (small)", "seed": 2,
             "link": {"bandwidth_mbit": 100, "delay_ms": 10}}
    hybrid = {**BASE, "model": "kimi-linear-mini (small)"}
    assert run_names([BASE, hybrid, other], ["a", "b", "c"]) == [
        "live-dense-vs-hybrid · dense-gqa-mini (small)", "live-dense-vs-hybrid · kimi-linear-mini (small)",
        "live-bandwidth-drop · kimi-linear-mini (small)"]


def test_settings_name_a_variant() -> None:
    names = run_names([BASE, {**BASE, "link": {"bandwidth_mbit": None, "delay_ms": 10}},
                       {**BASE, "threshold_start": 4096}], ["a", "b", "c"])
    assert names == ["link 50 Mbit/s, 10 ms · t 2,048", "link unshaped, 10 ms · t 2,048",
                     "link 50 Mbit/s, 10 ms · t 4,096"]
    assert run_names([BASE, {**BASE, "scheduler": {"short_term": True, "long_term": False}}], ["a", "b"]) == [
        "scheduler off", "scheduler short-term"]


def test_runs_that_differ_in_nothing_recorded_keep_their_folders() -> None:
    assert run_names([BASE, dict(BASE)], ["run-1", "run-2"]) == ["run-1", "run-2"]
    assert run_names([{}, {"engine": "live"}], ["old", "new"]) == ["old", "live"]  # an old run lacks keys


def test_runs_have_distinct_colours_that_are_not_the_routes() -> None:
    assert len(set(RUN_COLORS)) == len(RUN_COLORS) and not set(RUN_COLORS) & set(ROUTE_COLORS.values())
    assert run_color(0) != run_color(1) and run_color(len(RUN_COLORS)) == run_color(0)
