"""A sweep's directory read back (`read_results`, and a resumed sweep's `_read_existing`) through the
run-folder reader: a link, a FIFO or a nested sweep.json is refused in one line, never followed,
waited on or decoded into a RecursionError."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from emulator.errors import ScenarioError
from emulator.sweep.store import DOC, PARQUET, SWEEP_KIND, read_results

SECRET = "TOPSECRET-3f81c0"


def _sweep_dir(path: Path) -> Path:
    path.mkdir(parents=True)
    (path / DOC).write_text(json.dumps({"kind": SWEEP_KIND, "v": 1, "columns": {"axes": [], "metrics": []}}))
    pq.write_table(pa.table({"point_id": ["p0"], "status": ["ok"]}), path / PARQUET)
    return path


def _refused(out: Path, *words: str) -> None:
    with pytest.raises(ScenarioError) as info:
        read_results(out)
    text = str(info.value)
    assert "\n" not in text and SECRET not in text
    for word in words:
        assert word in text, text


def test_a_sweep_directory_reads_back(tmp_path: Path) -> None:
    rows, doc = read_results(_sweep_dir(tmp_path / "s"))
    assert rows["point_id"].tolist() == ["p0"] and doc["kind"] == SWEEP_KIND


def test_a_nested_sweep_json_is_refused_in_one_line(tmp_path: Path) -> None:
    out = _sweep_dir(tmp_path / "s")
    (out / DOC).write_text("[" * 100_000 + "]" * 100_000)
    _refused(out, DOC, "deeper than")


def test_linked_sweep_files_are_not_followed(tmp_path: Path) -> None:
    elsewhere = _sweep_dir(tmp_path / "private")
    (elsewhere / DOC).write_text(json.dumps({"kind": SWEEP_KIND, "v": 1, "token": SECRET}))
    out = tmp_path / "s"
    out.mkdir()
    (out / DOC).symlink_to(elsewhere / DOC)
    (out / PARQUET).symlink_to(elsewhere / PARQUET)
    _refused(out, "symbolic link")


def test_a_fifo_sweep_json_does_not_block(tmp_path: Path) -> None:
    out = _sweep_dir(tmp_path / "s")
    (out / DOC).unlink()
    os.mkfifo(out / DOC)
    _refused(out, DOC, "not a regular file")
