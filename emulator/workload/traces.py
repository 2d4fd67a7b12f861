"""Trace readers: Mooncake JSONL and Azure LLM inference CSV, turned into RequestSpecs.

Every row is validated (a bad row names file, line and field, never its content); lines, rows and
numbers are capped (emulator/limits.py). Arrival times are relative to the first row and multiplied
by time_scale: 0.5 replays twice as fast, 2.0 half as fast. Lengths are multiplied by length_scale,
rounded, and kept >= 1. A read says what it covers (TraceReplay): rows beyond a cap or the run's
horizon are counted, never silently dropped; `check_trace` reads every row for `validate`.
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from pathlib import Path
from typing import Literal

from emulator.control.types import RequestSpec
from emulator.errors import ScenarioError
from emulator.limits import MAX_OUTPUT_TOKENS, MAX_TOKENS
from emulator.workload.lines import MAX_SHOWN, RowCheck, read_lines
from emulator.workload.tokens import HASH_MASK, chain_hashes, text_hash

AZURE_COLUMNS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
MOONCAKE_KEYS = ("timestamp", "input_length", "output_length", "hash_ids")
MAX_STAMP_MS = 10**15  # about 31,700 years: any larger stamp is corrupt
PS_PER_S = 10**12  # stamps are integer picoseconds: Azure's 7 fractional digits stay exact


@dataclass(frozen=True, slots=True)
class TraceSpec:
    """Which trace to replay and how: the schema's `workload.trace` once converted."""

    format: Literal["mooncake", "azure"]
    path: str
    time_scale: float = 1.0  # multiplies arrival times: 0.5 = twice as fast
    length_scale: float = 1.0  # multiplies input and output lengths
    max_requests: int | None = None
    block_tokens: int = 512
    skip_bad_rows: bool = False  # pass over a row that cannot be read (counted, first ones listed)

    def __post_init__(self) -> None:
        if self.format not in ("mooncake", "azure"):
            raise ScenarioError(f"trace.format: {self.format!r} is unknown; use mooncake or azure")
        for field in ("time_scale", "length_scale"):
            value = getattr(self, field)
            ok = isinstance(value, int | float) and math.isfinite(value) and 0 < value <= 1e6
            if not ok:
                raise ScenarioError(
                    f"trace.{field}: {value!r} must be in (0, 1e6]; use 1.0 to keep the trace's"
                )
        for field in ("max_requests", "block_tokens"):
            value = getattr(self, field)
            if value is None and field == "max_requests":
                continue
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ScenarioError(f"trace.{field}: {value!r} must be a whole number >= 1")


@dataclass(frozen=True, slots=True)
class _Row:
    stamp_ps: int
    input_tokens: int
    output_tokens: int
    hash_ids: tuple[int, ...] | None  # None: the trace has no sharing information


def _whole(value: object, where: str, field: str, low: int = 0, high: int = MAX_TOKENS) -> int:
    """A JSON/CSV value as an int in low..high, rejecting bools, fractions and text with a one-line
    reason that does not quote the value."""
    if isinstance(value, float) and value.is_integer() and abs(value) <= high:
        value = int(value)
    if isinstance(value, str):
        text = value.strip()
        digits = text.isascii() and text.isdigit() and len(text) <= len(str(high))
        value = int(text) if digits else None
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ScenarioError(f"{where}: {field}: not a whole number in {low}..{high}; fix the row")
    return value


class Stop(StrEnum):
    """Why a replay read fewer rows than the file holds."""

    CAP = "cap"  # max_requests rows replayed
    HORIZON = "horizon"  # a row arrives at or after the horizon (the run's duration)


@dataclass(frozen=True, slots=True)
class TraceReplay:
    """A trace read for a run: the requests, and what of the file they cover, so that a cap, a time
    window or a skipped row can be stated rather than silently applied."""

    requests: list[RequestSpec]
    num_rows: int | None  # rows in the file (no blank lines, no header); None: beyond MAX_LINES lines
    stop: Stop | None  # None: read to the file's end
    num_skipped: int = 0  # bad rows passed over (bad_rows: skip)
    skipped: tuple[str, ...] = ()  # the first MAX_SHOWN of them, one line each


def read_trace(spec: TraceSpec, horizon_s: float = math.inf) -> TraceReplay:
    """The requests of the rows that arrive before `horizon_s` (scaled time), at most
    `spec.max_requests`; rows past a stop are counted, not parsed."""
    rows = _data_lines(spec.path)
    parse = _parser(spec, rows)
    requests: list[RequestSpec] = []
    skipped: list[str] = []
    num_skipped, stop = 0, None
    first = previous = None
    for lineno, text in rows:
        where = f"trace {spec.path} line {lineno}"
        try:
            row = parse(text, where)
            _check_order(row, previous, where)
            request = _request(spec, row, where, len(requests) + 1, row.stamp_ps if first is None else first)
        except ScenarioError as err:
            if not spec.skip_bad_rows:
                raise
            num_skipped += 1
            if len(skipped) < MAX_SHOWN:
                skipped.append(str(err))
            continue
        if request.arrival_s >= horizon_s:
            stop = Stop.HORIZON
            break
        first = row.stamp_ps if first is None else first
        previous = row.stamp_ps
        requests.append(request)
        if spec.max_requests is not None and len(requests) >= spec.max_requests:
            stop = Stop.CAP
            break
    if not requests and stop is None:
        bad = f"; its {num_skipped:,} rows were all skipped as bad" if num_skipped else ""
        raise ScenarioError(f"trace {spec.path}: no rows to replay{bad}; point workload.trace.path at a "
                            f"{spec.format} trace")
    rest = _count_rest(rows) if stop is not None else 0
    past = 1 if stop is Stop.HORIZON else 0  # the row that crossed the horizon, read but not replayed
    num_rows = None if rest is None else len(requests) + num_skipped + past + rest
    return TraceReplay(requests, num_rows, stop, num_skipped, tuple(skipped))


def check_trace(spec: TraceSpec) -> RowCheck:
    """Read every row as a run would (fields, bounds, order, scaled lengths) and collect the first
    problems rather than stop at one: `validate` reports them all at once, with line numbers."""
    rows = _data_lines(spec.path)
    parse = _parser(spec, rows)
    problems: list[str] = []
    num_rows = num_problems = 0
    previous = None
    for lineno, text in rows:
        where = f"trace {spec.path} line {lineno}"
        num_rows += 1
        try:
            row = parse(text, where)
            _check_order(row, previous, where)
            _lengths(spec, row, where)
        except ScenarioError as err:
            num_problems += 1
            if len(problems) < MAX_SHOWN:
                problems.append(str(err))
            continue
        previous = row.stamp_ps
    if not num_rows:
        problems.append(f"trace {spec.path}: no rows; point workload.trace.path at a {spec.format} trace")
        num_problems = 1
    return RowCheck(num_rows, tuple(problems), num_problems)


def read_mooncake(
    path: str | Path,
    time_scale: float = 1.0,
    length_scale: float = 1.0,
    max_requests: int | None = None,
    block_tokens: int = 512,
) -> list[RequestSpec]:
    """Mooncake JSONL: {timestamp (ms, sorted), input_length, output_length, hash_ids}.

    hash_ids become chained block hashes, one per FULL block of the scaled input (at most one per
    hash id), so two requests share hash i exactly when they share hash_ids 0..i.
    """
    spec = TraceSpec("mooncake", str(path), time_scale, length_scale, max_requests, block_tokens)
    return read_trace(spec).requests


def read_azure(
    path: str | Path,
    time_scale: float = 1.0,
    length_scale: float = 1.0,
    max_requests: int | None = None,
    block_tokens: int = 512,
) -> list[RequestSpec]:
    """Azure LLM inference CSV: a header, then TIMESTAMP, ContextTokens, GeneratedTokens rows.

    TIMESTAMPs are wall-clock times with up to 7 fractional digits. The trace says nothing about
    shared prefixes, so every request gets block hashes of its own.
    """
    spec = TraceSpec("azure", str(path), time_scale, length_scale, max_requests, block_tokens)
    return read_trace(spec).requests


def _data_lines(path: str) -> Iterator[tuple[int, str]]:
    """(line number, text) of each non-blank line: rows, and an Azure file's header first."""
    return ((lineno, text) for lineno, text in read_lines(path, "trace") if text.strip())


def _parser(spec: TraceSpec, rows: Iterator[tuple[int, str]]) -> Callable[[str, str], _Row]:
    """The row parser of the spec's format; an Azure file's header is read from `rows` first (a
    bad header fails whatever bad_rows says: no row could be read without it)."""
    if spec.format == "mooncake":
        return _mooncake_row
    lineno, text = next(rows, (1, ""))
    return _AzureRows(_azure_columns(text, f"trace {spec.path} line {lineno}"))


def _count_rest(rows: Iterator[tuple[int, str]]) -> int | None:
    """How many rows are left, unparsed; None when the file passes the line cap."""
    try:
        return sum(1 for _ in rows)
    except ScenarioError:
        return None


def _check_order(row: _Row, previous: int | None, where: str) -> None:
    if previous is not None and row.stamp_ps < previous:
        raise ScenarioError(f"{where}: timestamp: before the previous row's; sort the trace")


def _lengths(spec: TraceSpec, row: _Row, where: str) -> tuple[int, int]:
    return (_scaled(row.input_tokens, spec.length_scale, where, "input length"),
            _scaled(row.output_tokens, spec.length_scale, where, "output length"))


def _request(spec: TraceSpec, row: _Row, where: str, number: int, first_ps: int) -> RequestSpec:
    """One row as a request: relative, scaled time; scaled lengths; chained block hashes."""
    request_id = f"{_ID_PREFIX[spec.format]}-{number:06d}"
    input_len, output_len = _lengths(spec, row, where)
    num_blocks = input_len // spec.block_tokens
    if row.hash_ids is None:
        hashes = chain_hashes(range(num_blocks), root=text_hash(request_id))
    else:
        hashes = chain_hashes(row.hash_ids[:num_blocks])
    return RequestSpec(id=request_id, arrival_s=(row.stamp_ps - first_ps) / PS_PER_S * spec.time_scale,
                       input_len=input_len, output_len=output_len, block_hashes=hashes)


_ID_PREFIX = {"mooncake": "mc", "azure": "az"}


def _scaled(tokens: int, scale: float, where: str, field: str) -> int:
    scaled = max(1, math.floor(tokens * scale + 0.5))
    high = MAX_OUTPUT_TOKENS if field.startswith("output") else MAX_TOKENS
    return _whole(scaled, where, f"{field} x length_scale", 1, high)


def _mooncake_row(text: str, where: str) -> _Row:
    try:
        row = json.loads(text)
    except (ValueError, RecursionError) as exc:
        reason = exc.msg if isinstance(exc, json.JSONDecodeError) else type(exc).__name__
        raise ScenarioError(f"{where}: not JSON ({reason}); write one object per line") from None
    if not isinstance(row, dict):
        kind = type(row).__name__
        raise ScenarioError(f"{where}: a JSON {kind}, not an object; write one object per line")
    if missing := [key for key in MOONCAKE_KEYS if key not in row]:
        raise ScenarioError(f"{where}: {', '.join(missing)}: missing; every row needs {', '.join(MOONCAKE_KEYS)}")
    stamp_ms = row["timestamp"]
    if isinstance(stamp_ms, bool) or not isinstance(stamp_ms, int | float):
        raise ScenarioError(f"{where}: timestamp: not a number of milliseconds; fix the row")
    if not (0 <= stamp_ms <= MAX_STAMP_MS and math.isfinite(stamp_ms)):
        raise ScenarioError(f"{where}: timestamp: outside 0..{MAX_STAMP_MS} ms; fix the row")
    hash_ids = row["hash_ids"]
    if not isinstance(hash_ids, list):
        raise ScenarioError(f"{where}: hash_ids: not a list of block ids; fix the row")
    return _Row(
        stamp_ps=round(stamp_ms * 10**9),
        input_tokens=_whole(row["input_length"], where, "input_length"),
        output_tokens=_whole(row["output_length"], where, "output_length", 0, MAX_OUTPUT_TOKENS),
        hash_ids=_block_ids(hash_ids, where),
    )


_INT_ONLY = {int}  # bool is a subclass of int, but type(True) is bool: refused


def _block_ids(values: list, where: str) -> tuple[int, ...]:
    """hash_ids as a tuple of ints in 0..HASH_MASK. The common case (every value a plain int in
    range) is checked in C-level passes; `_whole` runs per value only to name a bad one. A row
    carries dozens of ids, so this is most of a row's parse time."""
    ids = tuple(values)
    if set(map(type, ids)) <= _INT_ONLY and (not ids or (min(ids) >= 0 and max(ids) <= HASH_MASK)):
        return ids
    return tuple(_whole(v, where, "hash_ids", 0, HASH_MASK) for v in ids)


def _azure_columns(text: str, where: str) -> tuple[str, ...]:
    """The header's column names; it must name every column a row is read by."""
    columns = tuple(name.strip() for name in next(csv.reader([text]), []))
    missing = [name for name in AZURE_COLUMNS if name not in columns]
    if missing:
        raise ScenarioError(
            f"{where}: header lacks {', '.join(missing)}; the first row must name {', '.join(AZURE_COLUMNS)}"
        )
    return columns


class _AzureRows:
    """Reads rows by the header's column names (they may come in any order)."""

    def __init__(self, columns: tuple[str, ...]) -> None:
        self.columns = columns

    def __call__(self, text: str, where: str) -> _Row:
        fields = next(csv.reader([text]), [])
        if len(fields) != len(self.columns):
            raise ScenarioError(
                f"{where}: {len(fields)} fields, the header has {len(self.columns)}; fix the row"
            )
        row = dict(zip(self.columns, fields, strict=True))
        return _Row(
            stamp_ps=_azure_time_ps(row["TIMESTAMP"], where),
            input_tokens=_whole(row["ContextTokens"], where, "ContextTokens"),
            output_tokens=_whole(row["GeneratedTokens"], where, "GeneratedTokens", 0, MAX_OUTPUT_TOKENS),
            hash_ids=None,
        )


def _azure_time_ps(text: str, where: str) -> int:
    """`2023-11-16 18:17:03.9799600` -> picoseconds since 1970, every fractional digit kept."""
    whole, _, fraction = text.strip().partition(".")
    try:
        stamp = datetime.strptime(whole, "%Y-%m-%d %H:%M:%S")
        if fraction and not (fraction.isdigit() and len(fraction) <= 12):
            raise ValueError
    except ValueError:
        raise ScenarioError(
            f"{where}: TIMESTAMP: not a time; use YYYY-MM-DD HH:MM:SS[.fraction]"
        ) from None
    seconds = (stamp - datetime(1970, 1, 1)) // timedelta(seconds=1)
    return seconds * PS_PER_S + int(fraction.ljust(12, "0") or 0)
