"""`python -m emulator compare`: two recorded runs side by side (emulator/compare.py and
emulator/cli/compare.py; kept beside the virtual engine's tests, whose runs it reads)."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from emulator.cli import compare as compare_cli
from emulator.compare import compare_runs, format_table
from emulator.control.types import FailReason
from emulator.errors import TelemetryError
from emulator.scenario import Scenario
from emulator.telemetry.recorder import load_run
from emulator.virtual.engine import run_virtual


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
    assert comparison.row("egress_gbps_mean").b == 0.0
    assert comparison.ttft_a.size == comparison.ttft_b.size > 0
    table = format_table(comparison)
    assert "TTFT P90 (s)" in table and "a (virtual)" in table and "%" in table


def test_a_run_recorded_in_mbit_still_compares(two_runs: tuple[Path, Path]) -> None:
    """A run written before bit/s: its timeseries holds egress_mbit (read back as egress_bit_per_s)."""
    old = pd.DataFrame({"t_s": [0.0, 1.0], "egress_mbit": [0.0, 80.0], "link_capacity_mbit": [10000.0, 10000.0]})
    pq.write_table(pa.Table.from_pandas(old, preserve_index=False), two_runs[0] / "timeseries.parquet")
    assert load_run(two_runs[0])[1]["egress_bit_per_s"].tolist() == [0.0, 80e6]
    comparison = compare_runs(*two_runs)
    assert comparison.row("ttft_mean_s").a is not None and comparison.ttft_a.size > 0


def test_the_command_prints_the_table_and_writes_both_cdfs(two_runs: tuple[Path, Path], tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    parser = argparse.ArgumentParser()
    compare_cli.add_parser(parser.add_subparsers(dest="command"))
    out = tmp_path / "cmp.html"
    args = parser.parse_args(["compare", str(two_runs[0]), str(two_runs[1]), "--out", str(out)])
    assert args.command in compare_cli.COMMANDS and compare_cli.run(args) == 0
    printed = capsys.readouterr().out
    assert "throughput (req/s)" in printed and str(out) in printed
    page = out.read_text()
    assert page.count("a (virtual)") >= 1 and "b (virtual)" in page and "TTFT CDF" in page


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
