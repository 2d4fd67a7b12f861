"""The conformance suite: the same scripted runs against the run core, the live gateway and the
virtual gateway (tests/emulator/run/conformance_drivers.py), each step answered by the same actions,
and each request ending in the same record (its route, nodes, status and reason). Retries, node
loss at every stage, late and duplicate reports, flips with drain, the end of the run."""

from __future__ import annotations

import pytest

from emulator.control.types import Cluster
from tests.emulator.run.conformance_drivers import driver
from tests.emulator.run.core_case import SHORT
from tests.emulator.run.conformance_scripts import SCRIPTS, Script

CASES = [pytest.param(script, engine, id=f"{engine}: {script.name}")
         for script in SCRIPTS for engine in script.engines]


def _outcomes(records: list) -> list[tuple[object, ...]]:
    return [(r.id, r.route, r.prefill_node, r.decode_node, r.status, r.fail_reason) for r in records]


@pytest.mark.parametrize(("script", "engine"), CASES)
def test_each_engine_answers_each_step_as_the_script_says(script: Script, engine: str) -> None:
    under_test, reference = driver(engine), driver("core")
    try:
        for t, (step, expected) in enumerate(script.steps, start=1):
            assert under_test.step(step, float(t)) == list(expected), f"step {t}: {step}"
            reference.step(step, float(t))
        assert _outcomes(under_test.core.records) == _outcomes(reference.core.records)
        assert not under_test.core.open or script.steps[-1][0][0] not in ("finished", "stop", "drain_over")
    finally:
        if hasattr(under_test, "close"):
            under_test.close()


def test_every_script_runs_on_the_core_and_the_live_gateway_and_most_on_the_virtual_one() -> None:
    engines = [script.engines for script in SCRIPTS]
    assert all({"core", "live"} <= set(e) for e in engines)
    assert sum("virtual" in e for e in engines) >= len(SCRIPTS) // 2



def test_the_live_gateway_hands_the_router_its_workers_start_times() -> None:
    """Work left on the live engine (issue 28): two prompts queued at T(500) each; once the worker
    reports the first started, it counts until its start (the worker's own stamp) + T(500)."""
    live = driver("live")
    try:
        price = live.core.router.prefill_s(Cluster.LOCAL, SHORT)
        live.step(("arrive", "r1", SHORT), 1.0)
        live.step(("arrive", "r2", SHORT), 2.0)
        assert live.core.board.loads[1][1:] == (2 * SHORT, 2, True, pytest.approx(2 * price), 0.0)
        before = live.gateway.now()
        live.step(("prefill_started", "r1"), 3.0)
        load = live.core.board.loads[1]
        assert load.queued_s == pytest.approx(price) and before <= load.busy_until_s - price <= live.gateway.now()
        live.step(("prefill_done", "r1"), 4.0)
        assert live.core.board.loads[1][1:] == (SHORT, 1, True, pytest.approx(price), 0.0)
    finally:
        live.close()
