"""A record file is written whole or not at all: a full disk (a 12 KiB tmpfs), a read-only one, or a
folder that cannot be made gives one line naming the file and the cause (RecordError), leaves no
temporary file, and never a half-written file under the final name (the previous version stays)."""

from __future__ import annotations

import dataclasses
import errno
import json
import os
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from emulator.errors import RecordError
from emulator.telemetry.atomic_write import make_dir, write_atomic
from emulator.telemetry.recorder import RunRecorder
from tests.emulator.telemetry.conftest import hand_made_records
from tests.emulator.tmpfs_helpers import mounted_tmpfs

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root: mounts a tmpfs")


def _one_line(err: RecordError) -> str:
    text = str(err)
    assert "\n" not in text and text.startswith("record: "), text
    return text


def test_a_writer_that_fails_leaves_neither_the_file_nor_its_temporary(tmp_path: Path) -> None:
    def full_disk(tmp: str) -> None:
        Path(tmp).write_text("half")
        raise OSError(errno.ENOSPC, "No space left on device")

    target = tmp_path / "summary.json"
    with pytest.raises(RecordError) as caught:
        write_atomic(target, full_disk)
    text = _one_line(caught.value)
    assert str(target) in text and "no space left on device (ENOSPC)" in text and "--out" in text
    assert list(tmp_path.iterdir()) == []


def test_a_failed_rewrite_keeps_the_previous_file_whole(tmp_path: Path) -> None:
    target = tmp_path / "summary.json"
    write_atomic(target, lambda tmp: Path(tmp).write_text('{"v": 1}'))

    def refused(tmp: str) -> None:
        Path(tmp).write_text('{"v": 2, "trunc')
        raise OSError(errno.EACCES, "Permission denied")

    with pytest.raises(RecordError, match=r"permission denied \(EACCES\)"):
        write_atomic(target, refused)
    assert json.loads(target.read_text()) == {"v": 1} and [p.name for p in tmp_path.iterdir()] == ["summary.json"]


def test_an_error_without_an_errno_is_still_one_line(tmp_path: Path) -> None:
    def odd(tmp: str) -> None:
        raise OSError("Error writing bytes to file.\nDetail: something")

    with pytest.raises(RecordError) as caught:
        write_atomic(tmp_path / "requests.parquet", odd)
    assert "requests.parquet" in _one_line(caught.value)


def test_make_dir_names_a_folder_that_cannot_be_made(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    with pytest.raises(RecordError) as caught:
        make_dir(tmp_path / "file" / "run")
    assert "not created" in _one_line(caught.value) and "file/run" in str(caught.value)


def _recorder(out: Path, num_requests: int = 200) -> RunRecorder:
    """A recorder holding `num_requests` of the hand-made records (renamed) and 50 samples."""
    recorder = RunRecorder(out)
    base = hand_made_records()
    for i in range(num_requests):
        recorder.add_request(dataclasses.replace(base[i % len(base)], id=f"rq-{i:06d}"))
    for t in range(50):
        recorder.add_sample(float(t), completed=t, in_flight=1)
    return recorder


@pytest.mark.root
@needs_root
def test_a_full_disk_gives_one_line_and_no_partial_summary(tmp_path: Path) -> None:
    with mounted_tmpfs(tmp_path / "disk", "12k") as disk:
        out = disk / "run"
        with pytest.raises(RecordError) as caught:
            _recorder(out).finish({"engine": "virtual"})
        text = _one_line(caught.value)
        assert "no space left on device (ENOSPC)" in text and str(out) in text
        names = sorted(p.name for p in out.iterdir())
        assert "summary.json" not in names and not [n for n in names if n.endswith(".tmp")], names
        for name in names:  # whatever got through is whole
            assert name.endswith(".parquet"), names
            pq.read_table(out / name)


@pytest.mark.root
@needs_root
def test_a_full_disk_keeps_the_previous_record(tmp_path: Path) -> None:
    """The live engine writes its record twice: a second write that no longer fits leaves the first."""
    with mounted_tmpfs(tmp_path / "disk", "64k") as disk:
        out = disk / "run"
        first = _recorder(out, num_requests=5).finish({"engine": "live", "record": "first"})
        _fill(disk)
        with pytest.raises(RecordError):
            _recorder(out, num_requests=2000).finish({"engine": "live", "record": "second"})
        doc = json.loads((out / "summary.json").read_text())
        assert doc == json.loads(json.dumps(first)) and doc["meta"]["record"] == "first"
        assert pq.read_table(out / "requests.parquet").num_rows in (5, 2000)
        assert not [p.name for p in out.iterdir() if p.name.endswith(".tmp")]


def _fill(disk: Path) -> None:
    """Take all but about 4 KiB of the disk."""
    stat = os.statvfs(disk)
    (disk / "filler").write_bytes(b"\0" * max(0, stat.f_bavail * stat.f_frsize - 4096))


@pytest.mark.root
@needs_root
def test_a_read_only_disk_gives_one_line(tmp_path: Path) -> None:
    with mounted_tmpfs(tmp_path / "disk", "1m", read_only=True) as disk:
        with pytest.raises(RecordError) as caught:
            _recorder(disk).finish({"engine": "virtual"})
        assert "read-only file system (EROFS)" in _one_line(caught.value)
        with pytest.raises(RecordError, match=r"read-only file system \(EROFS\)"):
            make_dir(disk / "run")
