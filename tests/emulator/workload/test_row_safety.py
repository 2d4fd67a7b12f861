"""Trace and length files are outside input: a malformed row is one ScenarioError line naming the
file and line, never echoing the row, with numbers bounded by emulator/limits.py; a device file or
FIFO is refused instead of read or waited on; junk never allocates past a budget."""

from __future__ import annotations

import json
import os
import tracemalloc
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from emulator import limits
from emulator.errors import ScenarioError
from emulator.workload.lengths import EmpiricalLength
from emulator.workload.traces import read_azure, read_mooncake

SECRET = "s3cr3t-Zq9"
AZURE_HEADER = "TIMESTAMP,ContextTokens,GeneratedTokens"
BUDGET_BYTES = 64 << 20


def _mc(**fields) -> str:
    row = {"timestamp": 0, "input_length": 1024, "output_length": 8, "hash_ids": [1, 2]}
    return json.dumps({**row, **fields})


def _write(tmp_path: Path, name: str, lines: list[str]) -> Path:
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.mark.parametrize("bad", [
    _mc(input_length=SECRET), _mc(output_length=SECRET), _mc(hash_ids=[1, SECRET]),
    _mc(hash_ids=SECRET), _mc(timestamp=SECRET), SECRET, f'{{"{SECRET}": 1', f"[\"{SECRET}\"]",
])
def test_a_mooncake_row_is_never_echoed(tmp_path, bad):
    path = _write(tmp_path, "t.jsonl", [_mc(), bad])
    with pytest.raises(ScenarioError) as err:
        read_mooncake(path)
    text = str(err.value)
    assert text.startswith(f"trace {path} line 2") and SECRET not in text and "\n" not in text


@pytest.mark.parametrize("bad", [f"2023-11-16 18:17:03.1,10,{SECRET}", f"{SECRET},10,10",
                                 f"2023-11-16 18:17:03.1,{SECRET},1"])
def test_an_azure_row_is_never_echoed(tmp_path, bad):
    path = _write(tmp_path, "t.csv", [AZURE_HEADER, bad])
    with pytest.raises(ScenarioError) as err:
        read_azure(path)
    assert "line 2" in str(err.value) and SECRET not in str(err.value)


def test_a_length_line_is_never_echoed(tmp_path):
    path = _write(tmp_path, "l.txt", ["100", SECRET])
    with pytest.raises(ScenarioError) as err:
        EmpiricalLength.from_path(path)
    assert f"{path} line 2" in str(err.value) and SECRET not in str(err.value)


@pytest.mark.parametrize("field, value", [("input_length", limits.MAX_TOKENS + 1),
                                          ("output_length", limits.MAX_OUTPUT_TOKENS + 1),
                                          ("input_length", 10**400)])
def test_trace_numbers_are_bounded_by_the_limits_table(tmp_path, field, value):
    path = _write(tmp_path, "t.jsonl", [_mc(**{field: value})])
    with pytest.raises(ScenarioError, match=f"line 1: {field}: not a whole number in"):
        read_mooncake(path)


def test_a_length_above_the_token_bound_is_refused(tmp_path):
    path = _write(tmp_path, "l.txt", [str(limits.MAX_TOKENS + 1)])
    with pytest.raises(ScenarioError, match=f"line 1: not a whole number of tokens in 1..{limits.MAX_TOKENS}"):
        EmpiricalLength.from_path(path)


def test_a_fifo_or_device_is_refused(tmp_path):
    fifo = tmp_path / "t.jsonl"
    os.mkfifo(fifo)
    with pytest.raises(ScenarioError, match="not a regular file"):
        read_mooncake(fifo)
    with pytest.raises(ScenarioError, match="not a regular file"):
        EmpiricalLength.from_path("/dev/zero")


ROWS = st.one_of(
    st.text(max_size=80),
    st.builds(_mc, timestamp=st.one_of(st.integers(), st.floats(), st.text(max_size=5)),
              input_length=st.one_of(st.integers(), st.floats(), st.none()),
              output_length=st.integers(), hash_ids=st.lists(st.integers(), max_size=8)),
    st.integers(1, 60).map(lambda d: '{"timestamp": ' + "[" * d * 100 + "]" * d * 100 + "}"),
    st.integers(0, 20).map(lambda n: "9" * (n * 500)),
)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(lines=st.lists(ROWS, max_size=5))
def test_junk_rows_raise_only_scenario_errors_within_budget(tmp_path, lines):
    for name, header in (("t.jsonl", []), ("t.csv", [AZURE_HEADER]), ("l.txt", [])):
        path = tmp_path / name
        path.write_text("\n".join([*header, *lines]), encoding="utf-8", errors="surrogatepass")
    tracemalloc.start()
    try:
        for reader, name in ((read_mooncake, "t.jsonl"), (read_azure, "t.csv"),
                             (EmpiricalLength.from_path, "l.txt")):
            try:
                reader(tmp_path / name)
            except ScenarioError as exc:
                assert "\n" not in str(exc)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < BUDGET_BYTES
