"""Writes a run's directory (requests.parquet, timeseries.parquet, summary.json, report.html) and
reads it back for the dashboard and `compare`.

Every file is written whole or not at all (atomic_write.py), summary.json last: a reader never
sees half a run, and a full disk raises one line naming the file (RecordError). The
numbers come from `records.py`, the timeseries row from `timeseries.py`, the charts from `report.py`.
A run recorded by an earlier version reads back with today's timeseries columns (`upgrade_timeseries`).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
from collections.abc import Mapping
from dataclasses import asdict
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from emulator.control.types import Cluster, NodeId, Role
from emulator.errors import RunFileError, TelemetryError
from emulator.telemetry.atomic_write import make_dir, write_atomic
from emulator.telemetry.outcome import judge, outcome_of
from emulator.telemetry.records import REQUEST_FIELDS, RequestRecord, summarize
from emulator.telemetry.report import write_report
from emulator.telemetry.run_files import RunFolder
from emulator.telemetry.run_meta import RunMeta
from emulator.telemetry.schemas import MetricsSnapshot
from emulator.telemetry.timeseries import COLUMNS, TimeseriesRow, upgrade_timeseries

log = logging.getLogger(__name__)

RUN_KIND = "prfaas-run"
SUMMARY_VERSION = 1
FILES = ("requests.parquet", "timeseries.parquet", "summary.json", "report.html")
_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1
_OPTIONAL_FIELDS = frozenset(f.name for f in dataclasses.fields(RequestRecord) if f.default is None)

_FLOAT, _INT, _STR = pa.float64(), pa.int64(), pa.string()
REQUEST_SCHEMA = pa.schema([
    ("id", _STR), ("arrival_s", _FLOAT), ("input_len", _INT), ("cached_len", _INT),
    ("incremental_len", _INT), ("route", _STR), ("prefill_node", _STR), ("decode_node", _STR),
    ("queue_s", _FLOAT), ("prefill_start_s", _FLOAT), ("prefill_end_s", _FLOAT),
    ("transfer_start_s", _FLOAT), ("transfer_end_s", _FLOAT), ("kv_bytes", _INT),
    ("first_token_s", _FLOAT), ("ttft_s", _FLOAT), ("tpot_s", _FLOAT), ("output_len", _INT),
    ("finish_s", _FLOAT), ("status", _STR), ("fail_reason", _STR), ("fail_detail", _STR),
])
assert tuple(REQUEST_SCHEMA.names) == REQUEST_FIELDS, "parquet schema and RequestRecord disagree"
# Runs recorded before fail_detail existed (fail_reason then held the words): still readable
_ADDED_FIELDS = ("fail_detail",)

# The columns of timeseries.parquet, exactly these for both engines (emulator/telemetry/timeseries.py)
TIMESERIES_COLUMNS = COLUMNS
_COLUMN_SET = frozenset(COLUMNS)


class RunRecorder:
    """Collects one run's request records and time samples in memory; `finish` writes them."""

    def __init__(self, out_dir: str | Path) -> None:
        self.out_dir = Path(out_dir)
        self._records: list[RequestRecord] = []
        self._samples: list[dict[str, float | None]] = []
        self._notes: list[str] = []  # values left out of the record, one line each

    @property
    def num_requests(self) -> int:
        return len(self._records)

    def add_request(self, record: RequestRecord) -> None:
        self._records.append(record)

    def add_row(self, row: TimeseriesRow) -> None:
        """One timeseries row, every column stated (the samplers' way)."""
        self.add_sample(**row.as_dict())

    def add_sample(self, t_s: float, **columns: float | int | None) -> None:
        """One timeseries row from TimeseriesRow's columns (one left out is recorded as missing);
        every value is a number or None (stored as float64, NaN)."""
        row: dict[str, float | None] = {"t_s": self._float("timeseries", "t_s", t_s)}
        for name, value in columns.items():
            if name not in _COLUMN_SET:
                raise TelemetryError(f"timeseries: column {name!r} is not a TimeseriesRow column; "
                                     "add it to emulator/telemetry/timeseries.py for both engines")
            is_number = isinstance(value, int | float) and not isinstance(value, bool)
            if value is not None and not is_number:
                raise TelemetryError(f"timeseries: {name} = {value!r} is not a number; "
                                     "record numbers or None only")
            row[name] = None if value is None else self._float("timeseries", name, value)
        self._samples.append(row)

    def _float(self, where: str, name: str, value: float | int) -> float | None:
        """`value` as a finite float, or None (noted once per field) when it has none: one absurd
        value must not cost the run its record."""
        try:
            number = float(value)
        except OverflowError:
            number = math.nan
        if math.isfinite(number):
            return number
        self._note(f"{where}: {name} = {_short(value)} is not a finite number; recorded as missing")
        return None

    def _note(self, line: str) -> None:
        if line not in self._notes:
            log.warning("recorder: %s", line)
            self._notes.append(line)

    def add_snapshot(self, snapshot: MetricsSnapshot) -> None:
        """Record what was (or would have been) published, as one timeseries row."""
        self.add_row(snapshot_row(snapshot))

    def finish(self, meta: RunMeta | Mapping[str, Any],
               expect: Mapping[str, Mapping[str, float]] | None = None,
               duration_s: float | None = None) -> dict[str, Any]:
        """Write the four files; return the summary.json document.

        `duration_s` defaults to the span from the first arrival to the last finish (or sample).
        The document holds `summary` (the numbers), `meta` (the engines' RunMeta; a plain mapping
        for tools and tests), `expect`, and its verdict (outcome.judge): `expect_status`,
        `expect_note` in words and `expect_failures`, one line each, none on a stopped run.
        """
        meta = meta.as_json() if isinstance(meta, RunMeta) else dict(meta)
        make_dir(self.out_dir)
        rows, records = [], []
        for record in self._records:
            row, checked = self._checked(record)
            rows.append(row)
            records.append(checked)
        duration = self._duration_s() if duration_s is None else duration_s
        duration = self._float("summary", "duration_s", duration) or 0.0
        summary = self._json_safe("summary", summarize(records, duration))
        expect = {k: dict(v) for k, v in (expect or {}).items()}
        verdict = judge(summary, expect, outcome_of(meta))
        doc = {"kind": RUN_KIND, "v": SUMMARY_VERSION, "summary": summary,
               "meta": self._json_safe("meta", meta), "expect": self._json_safe("expect", expect),
               "expect_status": verdict.status.value, "expect_note": verdict.note,
               "expect_failures": list(verdict.failures), "record_notes": self._notes}
        requests = pa.Table.from_pylist(rows, schema=REQUEST_SCHEMA)
        timeseries = self._timeseries_table()
        write_atomic(self.out_dir / "requests.parquet", lambda p: pq.write_table(requests, p))
        write_atomic(self.out_dir / "timeseries.parquet", lambda p: pq.write_table(timeseries, p))
        try:  # the report is a view of the record: its failure is noted, never fatal
            write_atomic(self.out_dir / "report.html",
                          lambda p: write_report(p, requests.to_pandas(), timeseries.to_pandas(), doc))
        except Exception as err:
            self._note(f"report.html not written: {type(err).__name__}: {_short(err)}")
        text = json.dumps(doc, indent=2, allow_nan=False, default=str) + "\n"
        write_atomic(self.out_dir / "summary.json", lambda p: Path(p).write_text(text))  # last: the run is whole
        log.info("run recorded in %s: %d requests, %d samples", self.out_dir,
                 len(self._records), len(self._samples))
        return doc

    def _checked(self, record: RequestRecord) -> tuple[dict[str, Any], RequestRecord]:
        """`record` as a parquet row, and as a record for the summary, with every number that
        parquet (int64, float64) cannot hold left out (None where the record's type allows)."""
        row, bad = asdict(record), []
        for name, kind in ((f.name, f.type) for f in REQUEST_SCHEMA):
            value = row[name]
            if value is None or isinstance(value, str):
                continue
            if kind == _INT and not (isinstance(value, int) and _INT64_MIN <= value <= _INT64_MAX):
                bad.append(name)
            elif kind == _FLOAT and self._float("requests", name, value) is None:
                bad.append(name)
        for name in bad:
            self._note(f"requests: {record.id}: {name} = {_short(row[name])} does not fit the record; "
                       "recorded as missing")
            row[name] = None
        optional = {name: None for name in bad if name in _OPTIONAL_FIELDS}
        return row, dataclasses.replace(record, **optional) if optional else record

    def _json_safe(self, where: str, value: Any) -> Any:
        """`value` for strict JSON: non-finite floats and integers past int64 become None (noted)."""
        if isinstance(value, Mapping):
            return {str(k): self._json_safe(f"{where}.{k}", v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [self._json_safe(where, v) for v in value]
        if isinstance(value, float) and not math.isfinite(value):
            self._note(f"{where} = {value} is not a finite number; recorded as null")
            return None
        if isinstance(value, int) and not isinstance(value, bool) and not _INT64_MIN <= value <= _INT64_MAX:
            self._note(f"{where} = {_short(value)} is out of range; recorded as null")
            return None
        return value

    def _duration_s(self) -> float:
        starts = [r.arrival_s for r in self._records] + [s["t_s"] or 0.0 for s in self._samples]
        ends = [r.finish_s for r in self._records if r.finish_s is not None] + starts
        return max(ends) - min(starts) if starts else 0.0

    def _timeseries_table(self) -> pa.Table:
        rows = sorted(self._samples, key=lambda row: row["t_s"] or 0.0)
        schema = pa.schema([(name, pa.float64()) for name in COLUMNS])
        return pa.Table.from_pylist(rows, schema=schema)


def snapshot_row(snapshot: MetricsSnapshot) -> TimeseriesRow:
    """The live engine's sample: a MetricsSnapshot flattened into the row both engines record
    (what the snapshot does not carry is None; TimeseriesRow says which and why)."""
    queues, requests = snapshot.queues, snapshot.requests
    return TimeseriesRow(
        t_s=snapshot.t_s, threshold_tokens=snapshot.threshold_tokens,
        egress_bit_per_s=snapshot.egress_bit_per_s, link_capacity_bit_per_s=snapshot.link_capacity_bit_per_s,
        link_utilization=snapshot.link_utilization, queue_remote_prefill=queues.remote_prefill,
        queue_local_prefill=queues.local_prefill, queue_decode=queues.decode,
        ttft_p50_s=snapshot.ttft_p50_s, ttft_p90_s=snapshot.ttft_p90_s, in_flight=requests.in_flight,
        completed=requests.completed, failed=requests.failed, retrans_rate=snapshot.retrans_rate,
        rtt_ms=snapshot.rtt_ms, num_local_prefill=_num_local_prefill(snapshot.roles),
        num_decode_active=None, num_transfers_active=None,
    )


def _num_local_prefill(roles: Mapping[str, str]) -> int | None:
    """Local nodes in the prefill role, from the snapshot's node names; None before any node."""
    if not roles:
        return None
    count = 0
    for name in roles:
        try:
            node = NodeId.parse(name)
        except ValueError:
            continue
        if node.cluster is Cluster.LOCAL and node.role is Role.PREFILL:
            count += 1
    return count


def _short(value: object) -> str:
    """A value for a one-line note: long numbers by their size, never thousands of digits."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > _INT64_MAX:
        return f"an integer of {len(str(abs(value))) if abs(value).bit_length() < 10_000 else 'over 3000'} digits"
    text = " ".join(str(value).split())
    return text if len(text) <= 80 else text[:77] + "..."


def load_run(run_dir: str | Path | RunFolder) -> tuple[pd.DataFrame, pd.DataFrame, dict[str, Any]]:
    """(requests, timeseries, summary.json document) of a recorded run, the timeseries in today's
    columns; TelemetryError if `run_dir` is missing, incomplete or not a run directory. The files are
    read through run_files.RunFolder: no link followed, each capped, JSON depth bounded."""
    folder = run_dir if isinstance(run_dir, RunFolder) else RunFolder(Path(run_dir))
    path = folder.path
    try:
        missing = [name for name in FILES[:3] if folder.info(name) is None]
    except RunFileError as err:
        raise TelemetryError(f"run dir {str(path)!r}: {err.reason}; pass the --out directory "
                             "of a finished run") from None
    if missing:
        raise TelemetryError(f"run dir {str(path)!r} lacks {', '.join(missing)}; is it the --out "
                             "directory of a finished `python -m emulator run`?")
    try:
        doc = folder.read_json("summary.json")
    except RunFileError as err:
        raise TelemetryError(f"run dir {str(path)!r}: summary.json is unreadable ({err.reason}); "
                             "re-run to record it again") from None
    if not isinstance(doc, dict) or doc.get("kind") != RUN_KIND or doc.get("v") != SUMMARY_VERSION:
        raise TelemetryError(f"run dir {str(path)!r}: summary.json is not a v{SUMMARY_VERSION} "
                             f"{RUN_KIND} summary; point at a directory this emulator wrote")
    try:
        requests = folder.read_parquet("requests.parquet").to_pandas()
        timeseries = folder.read_parquet("timeseries.parquet").to_pandas()
    except RunFileError as err:
        raise TelemetryError(f"run dir {str(path)!r}: a parquet file is unreadable ({err.where.rpartition('/')[2]} "
                             f"{err.reason}); re-run to record it again") from None
    if tuple(requests.columns) == REQUEST_FIELDS[:-len(_ADDED_FIELDS)]:
        for name in _ADDED_FIELDS:
            requests[name] = None
    if tuple(requests.columns) != REQUEST_FIELDS:
        raise TelemetryError(f"run dir {str(path)!r}: requests.parquet has columns "
                             f"{list(requests.columns)}; expected the design.md record fields")
    return requests, upgrade_timeseries(timeseries), doc
