"""Trace readers on the real Mooncake and Azure files, and on malformed files written per test."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from emulator.errors import ScenarioError
from emulator.scenario.shared_data import shared_dir
from emulator.workload.tokens import chain_hashes, synthesize_tokens
from emulator.workload.traces import Stop, TraceSpec, check_trace, read_azure, read_mooncake, read_trace

TRACES = shared_dir() / "traces"
MOONCAKE = TRACES / "mooncake_synthetic_trace.jsonl"
AZURE = TRACES / "AzureLLMInferenceTrace_code.csv"


@pytest.fixture(scope="module")
def raw_mooncake() -> list[dict]:
    return [json.loads(line) for line in MOONCAKE.read_text().splitlines()]


@pytest.fixture(scope="module")
def mooncake():
    return read_mooncake(MOONCAKE)


@pytest.fixture(scope="module")
def azure():
    return read_azure(AZURE)


def test_mooncake_rows_times_and_ids(mooncake, raw_mooncake) -> None:
    assert len(mooncake) == 3993
    assert [r.id for r in mooncake[:2]] == ["mc-000001", "mc-000002"]
    assert mooncake[-1].id == "mc-003993"
    arrivals = [r.arrival_s for r in mooncake]
    assert arrivals[0] == 0.0 and arrivals == sorted(arrivals)
    assert arrivals[-1] == pytest.approx(raw_mooncake[-1]["timestamp"] / 1000)
    assert [r.input_len for r in mooncake] == [row["input_length"] for row in raw_mooncake]
    assert [r.output_len for r in mooncake] == [row["output_length"] for row in raw_mooncake]


def test_mooncake_keeps_one_chained_hash_per_full_block(mooncake, raw_mooncake) -> None:
    for request, row in zip(mooncake, raw_mooncake, strict=True):
        num_blocks = min(row["input_length"] // 512, len(row["hash_ids"]))
        assert request.block_hashes == chain_hashes(row["hash_ids"][:num_blocks])


def _shared_pair(raw: list[dict]) -> tuple[int, int, int]:
    """Two rows sharing their first k hash ids (0 < k < both full-block counts), and k."""
    first_seen: dict[int, int] = {}
    for j, row in enumerate(raw):
        ids = row["hash_ids"][: row["input_length"] // 512]
        if not ids:
            continue
        i = first_seen.setdefault(ids[0], j)
        other = raw[i]["hash_ids"][: raw[i]["input_length"] // 512]
        k = 0
        while k < min(len(ids), len(other)) and ids[k] == other[k]:
            k += 1
        if i != j and k < min(len(ids), len(other)):
            return i, j, k
    raise AssertionError("the trace has no partially shared prefix")


def test_mooncake_shared_hash_ids_share_exactly_that_many_blocks(mooncake, raw_mooncake) -> None:
    i, j, k = _shared_pair(raw_mooncake)
    a, b = mooncake[i], mooncake[j]
    assert a.block_hashes[:k] == b.block_hashes[:k]
    assert all(x != y for x, y in zip(a.block_hashes[k:], b.block_hashes[k:], strict=False))
    tokens_a = synthesize_tokens(a, 512, seed=0)
    tokens_b = synthesize_tokens(b, 512, seed=0)
    np.testing.assert_array_equal(tokens_a[: k * 512], tokens_b[: k * 512])
    assert not np.array_equal(tokens_a[k * 512 : (k + 1) * 512], tokens_b[k * 512 : (k + 1) * 512])


def test_mooncake_cap_and_scales(mooncake) -> None:
    capped = read_mooncake(MOONCAKE, max_requests=100)
    assert capped == mooncake[:100]
    fast = read_mooncake(MOONCAKE, time_scale=0.5, max_requests=100)  # 0.5 = twice as fast
    assert [r.arrival_s for r in fast] == pytest.approx([r.arrival_s / 2 for r in capped])
    half = read_mooncake(MOONCAKE, length_scale=0.5, max_requests=100)
    for scaled, plain in zip(half, capped, strict=True):
        assert scaled.input_len == max(1, int(plain.input_len * 0.5 + 0.5))
        assert scaled.output_len == max(1, int(plain.output_len * 0.5 + 0.5))
        assert scaled.block_hashes == plain.block_hashes[: scaled.input_len // 512]


def test_azure_rows_and_sub_second_times(azure) -> None:
    assert len(azure) == 8819
    assert azure[0].id == "az-000001" and azure[-1].id == "az-008819"
    arrivals = [r.arrival_s for r in azure]
    assert arrivals[0] == 0.0 and arrivals == sorted(arrivals)
    assert arrivals[1] == pytest.approx(0.052, abs=1e-12)  # 18:17:04.0319600 - 18:17:03.9799600
    assert arrivals[-1] == pytest.approx(57 * 60 + 15.948056, abs=1e-9)  # 19:14:19.9280160
    assert (azure[0].input_len, azure[0].output_len) == (4808, 10)


def test_azure_block_hashes_are_request_unique(azure) -> None:
    seen: set[int] = set()
    for request in azure:
        assert len(request.block_hashes) == request.input_len // 512
        assert seen.isdisjoint(request.block_hashes)
        seen.update(request.block_hashes)


def test_azure_cap_and_scales(azure) -> None:
    spec = TraceSpec("azure", str(AZURE), time_scale=2.0, length_scale=0.25, max_requests=50)
    replay = read_trace(spec)
    assert len(replay.requests) == 50 and replay.stop is Stop.CAP
    assert replay.num_rows == 8819  # the rest is counted, not dropped from the record
    for request, plain in zip(replay.requests, azure[:50], strict=True):
        assert request.arrival_s == pytest.approx(plain.arrival_s * 2)
        assert request.input_len == max(1, int(plain.input_len * 0.25 + 0.5))


def _write(tmp_path: Path, name: str, lines: list[str]) -> Path:
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n")
    return path


def _mc(timestamp=0, input_length=1024, output_length=8, hash_ids=(1, 2)) -> str:
    row = {"timestamp": timestamp, "input_length": input_length,
           "output_length": output_length, "hash_ids": list(hash_ids)}
    return json.dumps(row)


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        (_mc(input_length="abc"), "line 3: input_length: not a whole number in 0..1048576"),
        (_mc(output_length=2.5), "line 3: output_length: not a whole number in 0..65536"),
        (_mc(output_length=-1), "line 3: output_length: not a whole number"),
        (_mc(hash_ids=[1, "x"]), "line 3: hash_ids: not a whole number"),
        ('{"timestamp": 5, "input_length": 10, "output_length": 1}', "line 3: hash_ids: missing"),
        (_mc(timestamp=None), "line 3: timestamp"),
        ("{not json", "line 3: not JSON"),
        ("[1, 2]", "line 3: a JSON list, not an object"),
        (_mc(timestamp=0), "line 3: timestamp: before the previous row"),
    ],
)
def test_malformed_mooncake_rows_name_file_line_and_field(tmp_path, bad, message) -> None:
    path = _write(tmp_path, "trace.jsonl", [_mc(timestamp=0), _mc(timestamp=10), bad])
    with pytest.raises(ScenarioError, match=message) as caught:
        read_mooncake(path)
    assert str(path) in str(caught.value) and "\n" not in str(caught.value)


def test_blank_lines_are_skipped_but_counted(tmp_path) -> None:
    path = _write(tmp_path, "trace.jsonl", [_mc(timestamp=0), "", _mc(timestamp=20), "", "oops"])
    with pytest.raises(ScenarioError, match="line 5: not JSON"):
        read_mooncake(path)
    assert [r.arrival_s for r in read_mooncake(path, max_requests=2)] == [0.0, 0.02]


def test_overlong_lines_and_missing_files_are_refused(tmp_path) -> None:
    path = _write(tmp_path, "trace.jsonl", [_mc(), _mc(hash_ids=range(200_000))])
    with pytest.raises(ScenarioError, match="line 2: longer than"):
        read_mooncake(path)
    with pytest.raises(ScenarioError, match="cannot open"):
        read_mooncake(tmp_path / "missing.jsonl")


AZURE_HEADER = "TIMESTAMP,ContextTokens,GeneratedTokens"


@pytest.mark.parametrize(
    ("lines", "message"),
    [
        ([AZURE_HEADER, "2023-11-16 18:17:03.1,4808,abc"], "line 2: GeneratedTokens: not a whole"),
        ([AZURE_HEADER, "16/11/2023 18:17,10,10"], "line 2: TIMESTAMP"),
        ([AZURE_HEADER, "2023-11-16 18:17:03.x,10,10"], "line 2: TIMESTAMP"),
        ([AZURE_HEADER, "2023-11-16 18:17:03,10"], "line 2: 2 fields, the header has 3"),
        (["TIMESTAMP,Context,GeneratedTokens"], "line 1: header lacks ContextTokens"),
        ([AZURE_HEADER, "2023-11-16 18:17:03.5,1,1", "2023-11-16 18:17:03.4,1,1"],
         "line 3: timestamp: before the previous row"),
    ],
)
def test_malformed_azure_rows_name_file_line_and_field(tmp_path, lines, message) -> None:
    path = _write(tmp_path, "trace.csv", lines)
    with pytest.raises(ScenarioError, match=message) as caught:
        read_azure(path)
    assert str(path) in str(caught.value)


def test_azure_columns_may_come_in_any_order(tmp_path) -> None:
    lines = ["GeneratedTokens,TIMESTAMP,ContextTokens", "7,2023-11-16 23:59:59.9999999,600",
             "9,2023-11-17 00:00:00.0000001,1100"]
    requests = read_azure(_write(tmp_path, "trace.csv", lines), block_tokens=512)
    assert [(r.input_len, r.output_len) for r in requests] == [(600, 7), (1100, 9)]
    assert requests[1].arrival_s == pytest.approx(2e-7, abs=1e-15)
    assert [len(r.block_hashes) for r in requests] == [1, 2]


@pytest.mark.parametrize(
    ("field", "value"),
    [("time_scale", 0.0), ("length_scale", float("inf")), ("max_requests", 0),
     ("block_tokens", 0)],
)
def test_bad_trace_settings_name_the_field(field, value) -> None:
    with pytest.raises(ScenarioError, match=f"trace.{field}"):
        read_mooncake(MOONCAKE, **{field: value})


JUNK_LINES = st.lists(
    st.one_of(
        st.text(max_size=60),
        st.builds(_mc, timestamp=st.integers(-5, 50), input_length=st.integers(-5, 5000),
                  hash_ids=st.lists(st.integers(-2, 2**64), max_size=12)),
    ),
    max_size=6,
)


@settings(max_examples=200, deadline=None)
@given(lines=JUNK_LINES)
def test_junk_gives_requests_or_a_scenario_error_never_a_traceback(tmp_path_factory, lines):
    path = tmp_path_factory.mktemp("junk") / "trace.jsonl"
    path.write_text("\n".join(lines), encoding="utf-8", errors="surrogatepass")
    for reader in (read_mooncake, read_azure):
        try:
            requests = reader(path)
        except ScenarioError as exc:
            assert "\n" not in str(exc)
        else:
            assert [r.arrival_s for r in requests] == sorted(r.arrival_s for r in requests)


def test_a_horizon_stops_reading_and_counts_the_rows_past_it(mooncake) -> None:
    spec = TraceSpec("mooncake", str(MOONCAKE))
    whole = read_trace(spec)
    assert (whole.stop, whole.num_rows, len(whole.requests)) == (None, 3993, 3993)
    window = read_trace(spec, horizon_s=60.0)
    expected = [r for r in mooncake if r.arrival_s < 60.0]
    assert window.requests == expected and window.stop is Stop.HORIZON
    assert window.num_rows == 3993


def test_bad_rows_fail_by_default_and_are_counted_when_skipped(tmp_path) -> None:
    lines = [_mc(timestamp=0), _mc(timestamp=10, input_length=-4), _mc(timestamp=20),
             '{"timestamp": 30, "input_length": 9', _mc(timestamp=40)]
    path = _write(tmp_path, "trace.jsonl", lines)
    with pytest.raises(ScenarioError, match="line 2: input_length"):
        read_trace(TraceSpec("mooncake", str(path)))
    replay = read_trace(TraceSpec("mooncake", str(path), skip_bad_rows=True))
    assert [r.arrival_s for r in replay.requests] == [0.0, 0.02, 0.04]
    assert [r.id for r in replay.requests] == ["mc-000001", "mc-000002", "mc-000003"]
    assert (replay.num_rows, replay.num_skipped, replay.stop) == (5, 2, None)
    assert [s.split(": ")[0].rsplit(" ", 2)[-2:] for s in replay.skipped] == [["line", "2"], ["line", "4"]]


def test_check_trace_reports_every_problem_with_its_line(tmp_path) -> None:
    lines = [_mc(timestamp=0), _mc(timestamp=10, input_length=-1), _mc(timestamp=20),
             '{"timestamp": 30, "output_length": 4, "hash_ids": []}', _mc(timestamp=5),
             '{"timestamp": 40, "input_length": 9']  # the last line cut short
    check = check_trace(TraceSpec("mooncake", str(_write(tmp_path, "t.jsonl", lines))))
    assert check.num_rows == 6 and check.num_problems == 4
    assert [p.split(": ", 1)[1] for p in check.problems] == [
        "input_length: not a whole number in 0..1048576; fix the row",
        "input_length: missing; every row needs timestamp, input_length, output_length, hash_ids",
        "timestamp: before the previous row's; sort the trace",
        "not JSON (Expecting ',' delimiter); write one object per line",
    ]
    assert [p.split(": ", 1)[0].rsplit(" ", 1)[-1] for p in check.problems] == ["2", "4", "5", "6"]


def test_check_trace_passes_the_shared_traces_and_lists_at_most_five_problems(tmp_path) -> None:
    check = check_trace(TraceSpec("mooncake", str(MOONCAKE)))
    assert (check.num_rows, check.problems) == (3993, ())
    azure = check_trace(TraceSpec("azure", str(AZURE)))
    assert (azure.num_rows, azure.num_problems) == (8819, 0)
    bad = _write(tmp_path, "bad.jsonl", [_mc(timestamp=i, output_length=-1) for i in range(12)])
    many = check_trace(TraceSpec("mooncake", str(bad)))
    assert (many.num_rows, many.num_problems, len(many.problems)) == (12, 12, 5)


def test_a_byte_order_mark_is_not_part_of_the_first_row(tmp_path) -> None:
    """Spreadsheet exports start with one; the header (and a JSON row) must still read."""
    csv_path = tmp_path / "t.csv"
    csv_path.write_text("\ufeff" + AZURE_HEADER + "\n2023-11-16 18:17:03.1,600,7\n", encoding="utf-8")
    assert [(r.input_len, r.output_len) for r in read_azure(csv_path)] == [(600, 7)]
    jsonl = tmp_path / "t.jsonl"
    jsonl.write_text("\ufeff" + _mc(timestamp=0) + "\n", encoding="utf-8")
    assert len(read_mooncake(jsonl)) == 1


@pytest.mark.parametrize(("name", "text", "skip"), [
    ("empty.jsonl", "\n\n", False), ("header-only.csv", AZURE_HEADER + "\n", False),
    ("all-bad.jsonl", "{oops\n[1]\n", True),
])
def test_a_trace_with_nothing_to_replay_is_refused(tmp_path, name: str, text: str, skip: bool) -> None:
    path = tmp_path / name
    path.write_text(text)
    spec = TraceSpec("azure" if name.endswith(".csv") else "mooncake", str(path), skip_bad_rows=skip)
    with pytest.raises(ScenarioError, match="no rows to replay"):
        read_trace(spec)
    if not skip:
        assert check_trace(spec).problems == (f"trace {path}: no rows; point workload.trace.path at a "
                                              f"{spec.format} trace",)
