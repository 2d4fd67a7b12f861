"""A sweep's directory: `sweep.parquet` (one row per point: point_id, the axes, seed, engine, the
kept metrics, status, reason, wall_s, node_id) and `sweep.json` (the sweep file, versions, timings,
counts). Rows are kept in memory and the parquet rewritten atomically on each flush, so a reader or
an interrupted sweep always finds a whole file. Knows nothing of Ray or of running points.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
from collections.abc import Callable
from importlib import metadata
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from emulator.errors import RunFileError, ScenarioError
from emulator.sweep.points import Point
from emulator.sweep.spec import Sweep
from emulator.telemetry.run_files import RunFolder

SWEEP_KIND = "prfaas-sweep"
SWEEP_VERSION = 1
PARQUET, DOC = "sweep.parquet", "sweep.json"


def fingerprint(sweep: Sweep) -> str:
    """What a point's result depends on besides its id: the base scenario's text, `set:`, the
    kept metrics, and (when given) the configurations' bundles and the capacity section. A
    directory of another fingerprint is not resumed. Sweeps without the last two keep the
    fingerprint they had before those existed."""
    spec = sweep.spec
    parts: list[Any] = [sweep.base_text, spec.set, spec.metrics]
    if spec.configurations is not None:
        parts.append({"configurations": spec.configurations})
    if spec.capacity is not None:
        parts.append({"capacity": spec.capacity.model_dump(mode="json")})
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:16]


def axis_types(sweep: Sweep, points: list[Point]) -> dict[str, pa.DataType]:
    """An axis column is float64 when every level is a number, else text (levels as JSON)."""
    types = {}
    for path in sweep.spec.axis_names:
        levels = [v for p in points for k, v in p.values if k == path]
        is_number = all(isinstance(v, int | float) and not isinstance(v, bool) for v in levels)
        types[path] = pa.float64() if is_number else pa.string()
    return types


class SweepStore:
    """The rows of DIR/sweep.parquet, those found there and those added since."""

    def __init__(self, out_dir: str | Path, sweep: Sweep, points: list[Point]) -> None:
        self.out_dir = Path(out_dir)
        self.sweep = sweep
        self.fingerprint = fingerprint(sweep)
        types = axis_types(sweep, points)
        self.schema = pa.schema(
            [("point_id", pa.string()), *types.items(), ("seed", pa.int64()), ("engine", pa.string()),
             *((m, pa.float64()) for m in sweep.spec.metrics),
             ("status", pa.string()), ("reason", pa.string()), ("wall_s", pa.float64()), ("node_id", pa.string())])
        self.rows: list[dict[str, Any]] = self._read_existing()
        self.num_before = len(self.rows)
        self._unflushed = 0

    @property
    def done_ids(self) -> set[str]:
        return {row["point_id"] for row in self.rows}

    def add(self, row: dict[str, Any]) -> None:
        self.rows.append({name: _cell(row.get(name), self.schema.field(name).type) for name in self.schema.names})
        self._unflushed += 1

    @property
    def num_unflushed(self) -> int:
        return self._unflushed

    def flush(self) -> None:
        self.out_dir.mkdir(parents=True, exist_ok=True)
        table = pa.Table.from_pylist(self.rows, schema=self.schema)
        _write_atomic(self.out_dir / PARQUET, lambda p: pq.write_table(table, p))
        self._unflushed = 0

    def write_doc(self, info: dict[str, Any]) -> dict[str, Any]:
        """Write sweep.json: the sweep file (text and parsed), versions and `info` (counts, timings)."""
        ok = sum(row["status"] == "ok" for row in self.rows)
        doc = {"kind": SWEEP_KIND, "v": SWEEP_VERSION, "name": self.sweep.spec.name,
               "sweep_file": str(self.sweep.path), "sweep_text": self.sweep.text,
               "sweep": self.sweep.spec.model_dump(mode="json"), "base_file": str(self.sweep.base_path),
               "fingerprint": self.fingerprint, "versions": versions(),
               "columns": {"axes": self.sweep.spec.axis_names, "metrics": list(self.sweep.spec.metrics)},
               "rows": {"total": len(self.rows), "ok": ok, "failed": len(self.rows) - ok}, **info}
        text = json.dumps(doc, indent=2, allow_nan=False, default=str) + "\n"
        self.out_dir.mkdir(parents=True, exist_ok=True)
        _write_atomic(self.out_dir / DOC, lambda p: Path(p).write_text(text))
        return doc

    def _read_existing(self) -> list[dict[str, Any]]:
        """The rows already in DIR, when DIR holds this sweep; refuses a DIR of another sweep. Read
        through run_files (no link followed, sizes and depth capped)."""
        folder = RunFolder(self.out_dir)
        if not os.path.lexists(self.out_dir / PARQUET):  # a new sweep (lexists: a link counts, and is refused)
            return []
        try:
            doc = folder.read_json(DOC) if folder.info(DOC) is not None else {}
            table = folder.read_parquet(PARQUET)
        except RunFileError as err:
            raise ScenarioError(f"--out {self.out_dir}: its sweep files are unreadable ({err.reason}); "
                                "use a new --out or delete the directory") from None
        if not isinstance(doc, dict):
            doc = {}
        if doc.get("fingerprint") != self.fingerprint or set(table.column_names) != set(self.schema.names):
            raise ScenarioError(f"--out {self.out_dir}: holds another sweep (base, set, metrics or axes "
                                "differ); use a new --out or delete the directory")
        return table.select(self.schema.names).cast(self.schema).to_pylist()


def read_results(out_dir: str | Path | RunFolder) -> tuple[pd.DataFrame, dict[str, Any]]:
    """(rows, sweep.json) of a sweep's directory, for readers such as the dashboard; ScenarioError
    in one line when DIR holds no sweep (yet) or its files are unreadable. Read through run_files:
    no link followed, sweep.json capped (MAX_RUN_JSON_BYTES, depth MAX_RUN_JSON_DEPTH), parquet too."""
    folder = out_dir if isinstance(out_dir, RunFolder) else RunFolder(Path(out_dir))
    out_dir = folder.path
    try:
        present = folder.info(DOC) is not None and folder.info(PARQUET) is not None
    except RunFileError:
        present = False
    if not present:
        raise ScenarioError(f"{out_dir}: no {DOC} and {PARQUET} yet; point at a sweep's --out directory "
                            "(a sweep writes them once its first points finish)")
    try:
        doc = folder.read_json(DOC)
        rows = folder.read_parquet(PARQUET).to_pandas()
    except RunFileError as err:
        name = err.where.rpartition("/")[2]
        raise ScenarioError(f"{out_dir}: its sweep files are unreadable ({name} {err.reason}); "
                            "run the sweep again into a new --out") from None
    if not isinstance(doc, dict) or doc.get("kind") != SWEEP_KIND:
        raise ScenarioError(f"{out_dir}: {DOC} is not a sweep's; point at a sweep's --out directory")
    return rows, doc


def versions() -> dict[str, str | None]:
    """The versions a sweep's numbers depend on."""
    def version(name: str) -> str | None:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            return None

    return {"python": platform.python_version(), "prfaas-lab": version("prfaas-lab"), "ray": version("ray"),
            "pyarrow": version("pyarrow"), "pydantic": version("pydantic")}


def _cell(value: Any, kind: pa.DataType) -> Any:
    """A row value as its column holds it: text axes hold JSON of non-text levels."""
    if value is None:
        return None
    if kind == pa.string() and not isinstance(value, str):
        return json.dumps(value)
    if kind == pa.float64():
        return float(value)
    return value


def _write_atomic(path: Path, write: Callable[[str], object]) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    write(str(tmp))
    os.replace(tmp, path)
