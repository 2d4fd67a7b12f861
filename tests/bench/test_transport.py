"""bench/transport.py's pure pieces on hand-made results: the --check rule (>= 0.95 of iperf3 in every
run, 5 runs at 1 Gbit/s) and a table of at most 10 lines. No link, no timing here."""

from __future__ import annotations

from types import ModuleType

import pytest

from tests.bench.scripts import load_bench


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    return load_bench("transport")


def _side(mbit: float) -> dict:
    return {"mbit": mbit, "sender_cpu_s_per_gb": 0.8, "receiver_cpu_s_per_gb": 1.7}


def _results(ratios_1g: list[float]) -> dict:
    rounds = [{"ours": _side(950 * r), "iperf3": _side(950)} for r in ratios_1g]
    summary = {"ours": _side(900), "iperf3": _side(950)}
    return {"vs_iperf3": [{"mbit": 1000, "delay_ms": 20, "rounds": rounds, "ratios": ratios_1g, "summary": summary}],
            "connections": [{"connections": 1, "mbit": 25.0}, {"connections": 8, "mbit": 400.0}],
            "pipelining": [{"tokens": 4096, "prefill_s": 2.0, "exposed_pipelined_s": 0.2, "exposed_after_s": 0.5,
                            "target_s": 0.25}]}


def test_check_passes_five_of_five_runs_at_or_above_the_target(bench: ModuleType) -> None:
    assert bench.check(_results([0.95, 0.97, 0.99, 0.96, 0.951])) == []


def test_check_names_the_runs_below_the_target_and_too_few_runs(bench: ModuleType) -> None:
    assert bench.check(_results([0.96, 0.94, 0.99, 0.90, 0.97])) == [
        "1000 Mbit/s: transfer/iperf3 below 0.95 in 2 of 5 runs (lowest 0.900)"]
    assert bench.check(_results([0.99, 0.98])) == [
        "1000 Mbit/s: 2 runs with iperf3; the target is 5 of 5 (use --runs 5)"]


def test_the_table_fits_in_ten_lines(bench: ModuleType, capsys: pytest.CaptureFixture[str]) -> None:
    results = _results([0.96] * 5)
    results["vs_iperf3"].insert(0, {**results["vs_iperf3"][0], "mbit": 100, "delay_ms": 10})
    results["pipelining"].append({**results["pipelining"][0], "tokens": 16384})
    bench.print_table(results)
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) <= 10 and "ours 900 0.80/1.70" in lines[1]
