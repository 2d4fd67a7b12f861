"""`python -m emulator compare`: two recorded runs side by side (emulator/telemetry/compare.py and
emulator/cli/compare.py; kept beside the virtual engine's tests, whose runs it reads)."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from emulator.cli import compare as compare_cli
from emulator.control.types import FailReason
from emulator.errors import TelemetryError
from emulator.scenario import Scenario, apply_overrides, load_scenario
from emulator.telemetry.compare import compare_runs, format_table
from emulator.telemetry.recorder import load_run
from emulator.virtual.engine import run_virtual
from tests.emulator.virtual.conftest import SCENARIOS

# What issue 15 added to summary.json; runs recorded before it lack these.
NEW_FIGURES = frozenset({
    "ttft_noqueue_mean_s", "ttft_noqueue_p50_s", "ttft_noqueue_p90_s", "prfaas_input_token_fraction",
    "prefix_hit_fraction", "prefix_hit_fraction_remote", "prefix_hit_fraction_local", "egress_bit_per_s_mean",
    "prefill_nodes", "decode_nodes"})


@pytest.fixture
def two_runs(small: Callable[..., Scenario], tmp_path: Path) -> tuple[Path, Path]:
    run_virtual(small(), tmp_path / "a")
    run_virtual(small(router={"policy": "local-only"}), tmp_path / "b")
    return tmp_path / "a", tmp_path / "b"


def test_compare_lines_up_the_summaries_with_relative_differences(two_runs: tuple[Path, Path]) -> None:
    comparison = compare_runs(*two_runs)
    ttft = comparison.row("ttft_mean_s")
    assert ttft.a is not None and ttft.b is not None and ttft.b > ttft.a  # local-only queues more
    assert ttft.relative == pytest.approx(ttft.b / ttft.a - 1)
    egress = comparison.row("egress_bit_per_s_mean")
    assert egress.b == 0.0 and egress.a is not None and egress.a > 0  # recorded in bit/s
    unit = "Gbit/s" if egress.a >= 1e9 else "Mbit/s"
    assert egress.label == f"egress mean ({unit})" and egress.per_unit == (1e9 if unit == "Gbit/s" else 1e6)
    assert comparison.row("prfaas_fraction").b == 0.0 and comparison.row("prfaas_input_token_fraction").b == 0.0
    noqueue, queued = comparison.row("ttft_noqueue_p90_s"), comparison.row("ttft_p90_s")
    assert noqueue.b is not None and queued.b is not None and noqueue.b <= queued.b
    assert comparison.ttft_a.size == comparison.ttft_b.size > 0
    table = format_table(comparison, width=120)
    # named by what tells them apart (the policy), headed by those names where they fit
    assert (comparison.label_a, comparison.label_b) == ("policy prfaas", "policy local-only")
    assert f"A: policy prfaas ({two_runs[0]})" in table and "TTFT P90 (s)" in table and "%" in table
    assert table.splitlines()[3].split() == ["metric", "policy", "prfaas", "policy", "local-only", "B", "vs", "A"]
    # local-only: nothing prefilled remote in B; each node a run names is lined up, A's first
    nodes = {n.node: n for n in comparison.nodes}
    assert nodes["remote-prefill-0"].a is not None and nodes["remote-prefill-0"].b is None
    assert [n.node for n in comparison.nodes][-1].startswith("local-decode-")


def test_a_run_recorded_in_mbit_still_compares(two_runs: tuple[Path, Path]) -> None:
    """A run written before bit/s: its timeseries holds egress_mbit (read back as egress_bit_per_s)."""
    old = pd.DataFrame({"t_s": [0.0, 1.0], "egress_mbit": [0.0, 80.0], "link_capacity_mbit": [10000.0, 10000.0]})
    pq.write_table(pa.Table.from_pandas(old, preserve_index=False), two_runs[0] / "timeseries.parquet")
    assert load_run(two_runs[0])[1]["egress_bit_per_s"].tolist() == [0.0, 80e6]
    comparison = compare_runs(*two_runs)
    assert comparison.row("ttft_mean_s").a is not None and comparison.ttft_a.size > 0


def test_the_command_prints_the_table_and_writes_both_cdfs(two_runs: tuple[Path, Path], tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str],
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "200")  # a wide terminal: the nodes of A and B side by side
    parser = argparse.ArgumentParser()
    compare_cli.add_parser(parser.add_subparsers(dest="command"))
    out = tmp_path / "cmp.html"
    args = parser.parse_args(["compare", str(two_runs[0]), str(two_runs[1]), "--out", str(out)])
    assert args.command in compare_cli.COMMANDS and compare_cli.run(args) == 0
    printed = capsys.readouterr().out
    assert "throughput (req/s)" in printed and str(out) in printed
    lines = printed.splitlines()
    for label in ("TTFT no-queue mean (s)", "TTFT no-queue P90 (s)", "offloaded (of requests)",
                  "offloaded (of input tokens)", "prefix hit (cached/input)", "prefix hit, remote",
                  "prefix hit, local"):
        assert any(line.startswith(label) for line in lines), label
    assert any(line.startswith("egress mean (") and "bit/s)" in line for line in lines)
    assert "the paper's Table 6 TTFT" in printed
    # per node, A then B: a remote prefill node of A, which B (local-only) lacks
    row = next(line for line in lines if line.strip().startswith("remote-prefill-0"))
    assert "req, busy " in row and ", queue " in row and row.split()[-1] == "-"
    page = out.read_text()
    assert "policy prfaas" in page and "policy local-only" in page and "TTFT CDF" in page
    assert page.count("<path ") == 2 and "<script" not in page  # both CDFs, drawn without plotly.js


def test_the_table_fits_a_narrow_terminal_and_the_page_goes_beside_run_a(
        two_runs: tuple[Path, Path], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """At 80 columns nothing runs past the edge and no name is cut: the columns are A and B, and the
    lines above say which run each is; the page is written beside run A, not into the current
    folder, says where, and is small (it was 4.8 MB of inlined plotly.js)."""
    monkeypatch.setenv("COLUMNS", "80")
    monkeypatch.chdir(two_runs[1])
    parser = argparse.ArgumentParser()
    compare_cli.add_parser(parser.add_subparsers(dest="command"))
    assert compare_cli.run(parser.parse_args(["compare", str(two_runs[0]), str(two_runs[1])])) == 0
    printed = capsys.readouterr().out
    lines = printed.splitlines()
    paths = {f"   {two_runs[0]}", f"   {two_runs[1]}"}  # a path too long for the line takes its own
    assert max(len(line) for line in lines[:-1] if line not in paths) <= 80, [line for line in lines if len(line) > 80]
    legend = "\n".join(lines[:4])
    assert "A: policy prfaas" in legend and str(two_runs[0]) in legend and "B: policy local-only" in legend
    head = next(line for line in lines if line.startswith("metric"))
    assert "policy prfaas" in head and "policy local-only" in head  # whole names, never cut at 16
    narrow = format_table(compare_runs(*two_runs), width=60).splitlines()  # names do not fit: A and B
    assert next(line for line in narrow if line.startswith("metric")).split() == ["metric", "A", "B", "B", "vs", "A"]
    page = two_runs[0].parent / "compare-a-vs-b.html"
    assert str(page) in lines[-1] and not (two_runs[1] / "compare.html").exists()
    assert 0 < page.stat().st_size < 100_000


def test_a_run_recorded_before_the_trace_study_figures_still_compares(two_runs: tuple[Path, Path]) -> None:
    """summary.json of an earlier version: no no-queue TTFT, prefix hits, bit/s egress or nodes."""
    path = two_runs[0] / "summary.json"
    doc = json.loads(path.read_text())
    gbps = doc["summary"]["egress_gbps_mean"]
    doc["summary"] = {k: v for k, v in doc["summary"].items() if k not in NEW_FIGURES}
    path.write_text(json.dumps(doc))
    comparison = compare_runs(*two_runs)
    assert comparison.row("ttft_noqueue_mean_s").a is None and comparison.row("ttft_noqueue_mean_s").b is not None
    assert comparison.row("egress_bit_per_s_mean").a == pytest.approx(gbps * 1e9)  # from Gbit/s
    assert all(n.a is None for n in comparison.nodes) and all(n.b is not None for n in comparison.nodes)
    table = format_table(comparison)
    row = next(line for line in table.splitlines() if line.startswith("TTFT no-queue mean (s)"))
    assert row.split()[4] == "-"


def test_a_virtual_runs_summary_carries_the_trace_study_figures(tmp_path: Path) -> None:
    """A trace replay with block hashes (prefix cache on): every figure there, and sane."""
    scenario = apply_overrides(load_scenario(SCENARIOS / "mooncake-replay.yaml"), ["workload.trace.max_requests=300"])
    summary = run_virtual(scenario, tmp_path / "trace")["summary"]
    assert NEW_FIGURES <= set(summary)
    for key in ("prfaas_fraction", "prfaas_input_token_fraction", "prefix_hit_fraction",
                "prefix_hit_fraction_remote", "prefix_hit_fraction_local"):
        assert summary[key] is not None and 0 <= summary[key] <= 1, key
    assert summary["prefix_hit_fraction"] > 0  # the trace's conversations share their first blocks
    for stat in ("mean", "p50", "p90"):  # each request's no-queue TTFT is at most its TTFT
        assert 0 < summary[f"ttft_noqueue_{stat}_s"] <= summary[f"ttft_{stat}_s"]
    assert summary["egress_bit_per_s_mean"] == pytest.approx(summary["egress_gbps_mean"] * 1e9)
    prefill, decode = summary["prefill_nodes"], summary["decode_nodes"]
    assert {n.split("-")[0] for n in prefill} == {"remote", "local"}
    for node, figures in prefill.items():
        assert 0 <= figures["busy_fraction"] <= 1 and figures["queue_mean"] >= 0, node
    requests = pd.read_parquet(tmp_path / "trace" / "requests.parquet")
    assert sum(f["requests"] for f in prefill.values()) == requests["prefill_end_s"].notna().sum()
    assert sum(f["requests"] for f in decode.values()) == summary["completed"]


def test_a_directory_that_is_no_run_is_refused_in_one_line(two_runs: tuple[Path, Path], tmp_path: Path) -> None:
    with pytest.raises(TelemetryError, match="does not exist"):
        compare_runs(two_runs[0], tmp_path / "missing")


def test_compare_lines_failures_up_by_reason(small: Callable[..., Scenario], tmp_path: Path) -> None:
    kills = [{"at_s": 5, "kill": n} for n in ("remote-prefill-0", "remote-prefill-1",
                                               "local-prefill-0", "local-prefill-1")]
    run_virtual(small(timeline=kills, duration_s=20), tmp_path / "down")
    run_virtual(small(duration_s=20), tmp_path / "up")
    comparison = compare_runs(tmp_path / "down", tmp_path / "up")
    by_reason = {row.reason: (row.a, row.b) for row in comparison.failures}
    assert by_reason["no_prefill_node"][0] > 0 and by_reason["no_prefill_node"][1] == 0
    assert set(by_reason) <= {r.value for r in FailReason}
    lines = format_table(comparison).splitlines()
    row = next(line for line in lines if line.strip().startswith("no_prefill_node"))
    assert row.split()[1:] == [str(by_reason["no_prefill_node"][0]), "0", f"-{by_reason['no_prefill_node'][0]}"]
