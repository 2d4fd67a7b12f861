"""Trace readers: Mooncake JSONL and Azure LLM inference CSV, turned into RequestSpecs.

Every row is validated (a bad row names file, line and field, never its content); lines, rows and
numbers are capped (emulator/limits.py). Arrival
times are relative to the first row and multiplied by time_scale: 0.5 replays twice as fast, 2.0
half as fast. Lengths are multiplied by length_scale, rounded, and kept >= 1.
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Literal

from emulator.control.types import RequestSpec
from emulator.errors import ScenarioError
from emulator.limits import MAX_OUTPUT_TOKENS, MAX_TOKENS
from emulator.workload.lines import read_lines
from emulator.workload.tokens import HASH_MASK, chain_hashes, text_hash

AZURE_COLUMNS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
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


def read_trace(spec: TraceSpec) -> list[RequestSpec]:
    """The trace a TraceSpec names, read with its scales and cap."""
    reader = read_mooncake if spec.format == "mooncake" else read_azure
    return reader(
        spec.path, spec.time_scale, spec.length_scale, spec.max_requests, spec.block_tokens
    )


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
    return _replay(spec, "mc", _rows(path, _mooncake_row))


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
    return _replay(spec, "az", _rows(path, _AzureParser()))


def _rows(path: str | Path, parse: Callable[[str, str], _Row | None]) -> Iterator[tuple[str, _Row]]:
    """(where, row) for each non-blank line; a parser returns None for a line that is no row."""
    for lineno, text in read_lines(path, "trace"):
        if text.strip():
            where = f"trace {path} line {lineno}"
            row = parse(text, where)
            if row is not None:
                yield where, row


def _replay(spec: TraceSpec, prefix: str, rows: Iterator[tuple[str, _Row]]) -> list[RequestSpec]:
    """Rows -> RequestSpecs: relative, scaled times; scaled lengths; chained block hashes."""
    requests: list[RequestSpec] = []
    first: int | None = None
    previous: int | None = None
    for where, row in rows:
        if previous is not None and row.stamp_ps < previous:
            raise ScenarioError(f"{where}: timestamp: before the previous row's; sort the trace")
        first = row.stamp_ps if first is None else first
        previous = row.stamp_ps
        request_id = f"{prefix}-{len(requests) + 1:06d}"
        input_len = _scaled(row.input_tokens, spec.length_scale, where, "input length")
        num_blocks = input_len // spec.block_tokens
        if row.hash_ids is None:
            hashes = chain_hashes(range(num_blocks), root=text_hash(request_id))
        else:
            hashes = chain_hashes(row.hash_ids[:num_blocks])
        elapsed_s = (row.stamp_ps - first) / PS_PER_S
        requests.append(
            RequestSpec(
                id=request_id,
                arrival_s=elapsed_s * spec.time_scale,
                input_len=input_len,
                output_len=_scaled(row.output_tokens, spec.length_scale, where, "output length"),
                block_hashes=hashes,
            )
        )
        if spec.max_requests is not None and len(requests) >= spec.max_requests:
            break
    return requests


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
    stamp_ms = row.get("timestamp")
    if isinstance(stamp_ms, bool) or not isinstance(stamp_ms, int | float):
        raise ScenarioError(f"{where}: timestamp: not a number of milliseconds; fix the row")
    if not (0 <= stamp_ms <= MAX_STAMP_MS and math.isfinite(stamp_ms)):
        raise ScenarioError(f"{where}: timestamp: outside 0..{MAX_STAMP_MS} ms; fix the row")
    hash_ids = row.get("hash_ids")
    if not isinstance(hash_ids, list):
        raise ScenarioError(f"{where}: hash_ids: not a list of block ids; fix the row")
    return _Row(
        stamp_ps=round(stamp_ms * 10**9),
        input_tokens=_whole(row.get("input_length"), where, "input_length"),
        output_tokens=_whole(row.get("output_length"), where, "output_length", 0, MAX_OUTPUT_TOKENS),
        hash_ids=tuple(_whole(h, where, "hash_ids", 0, HASH_MASK) for h in hash_ids),
    )


class _AzureParser:
    """Reads the header on the first line, then rows by its column names."""

    def __init__(self) -> None:
        self.columns: tuple[str, ...] | None = None

    def __call__(self, text: str, where: str) -> _Row | None:
        fields = next(csv.reader([text]), [])
        if self.columns is None:
            self.columns = tuple(name.strip() for name in fields)
            missing = [name for name in AZURE_COLUMNS if name not in self.columns]
            if missing:
                raise ScenarioError(
                    f"{where}: header lacks {', '.join(missing)}; "
                    f"the first row must name {', '.join(AZURE_COLUMNS)}"
                )
            return None
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
