"""The one reader of run and sweep folders: it stays inside the folder, follows no link, opens only
regular files (never waiting on a FIFO), caps each kind of file and bounds JSON depth; each refusal is
one RunFileError line naming the file and the reason, never the content."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from emulator.errors import RunFileError, TelemetryError
from emulator.limits import MAX_LOG_TAIL_BYTES, MAX_RUN_JSON_BYTES, MAX_RUN_JSON_DEPTH
from emulator.telemetry.run_files import RunFolder, list_folders

SECRET = "TOPSECRET-94c2a1"


@pytest.fixture
def secret(tmp_path: Path) -> Path:
    path = tmp_path / "outside" / "secret.txt"
    path.parent.mkdir()
    path.write_text(f"{SECRET}\n")
    return path


@pytest.fixture
def run(tmp_path: Path) -> Path:
    path = tmp_path / "runs" / "r1"
    path.mkdir(parents=True)
    (path / "summary.json").write_text(json.dumps({"kind": "prfaas-run", "summary": {"requests": 3}}))
    (path / "run.log").write_text("".join(f"line {i}\n" for i in range(100)))
    (path / "report.html").write_text("<html>report</html>")
    return path


def _refused(call, *words: str) -> str:
    """The one line `call()` refuses with; it holds `words` and never the secret."""
    with pytest.raises(RunFileError) as info:
        call()
    text = str(info.value)
    assert "\n" not in text and SECRET not in text
    for word in words:
        assert word in text, text
    return text


def test_reads_a_run_folders_own_files(run: Path) -> None:
    folder = RunFolder(run)
    assert folder.read_json("summary.json") == {"kind": "prfaas-run", "summary": {"requests": 3}}
    assert folder.read_bytes("report.html") == b"<html>report</html>"
    assert folder.read_tail("run.log").splitlines()[-1] == "line 99"
    assert folder.info("summary.json") is not None and folder.info("nope.json") is None
    inside = RunFolder(run.parent, "r1")  # the same folder as an entry of its runs folder
    assert inside.read_json("summary.json")["summary"] == {"requests": 3}
    assert inside.path == run and inside.name == "r1"


def test_a_link_to_a_file_outside_is_refused(run: Path, secret: Path) -> None:
    (run / "run.log").unlink()
    (run / "run.log").symlink_to(secret)
    (run / "report.html").unlink()
    (run / "report.html").symlink_to(secret)
    folder = RunFolder(run)
    _refused(lambda: folder.read_tail("run.log"), "run.log", "symbolic link")
    _refused(lambda: folder.read_bytes("report.html"), "report.html", "symbolic link")


def test_a_link_to_a_file_inside_is_refused_too(run: Path) -> None:
    (run / "copy.json").symlink_to(run / "summary.json")
    _refused(lambda: RunFolder(run).read_json("copy.json"), "copy.json", "symbolic link")


def test_a_linked_parent_folder_is_refused(tmp_path: Path, run: Path, secret: Path) -> None:
    (tmp_path / "runs" / "alias").symlink_to(run)
    _refused(lambda: RunFolder(tmp_path / "runs", "alias").read_json("summary.json"), "alias", "symbolic link")
    (tmp_path / "outside" / "report.html").write_text(SECRET)
    (run / "sub").symlink_to(tmp_path / "outside", target_is_directory=True)
    _refused(lambda: RunFolder(run).read_bytes("sub/report.html"), "sub", "symbolic link")


def test_a_fifo_is_refused_without_waiting(run: Path) -> None:
    os.mkfifo(run / "sweep.log")
    os.mkfifo(run / "other.json")
    _refused(lambda: RunFolder(run).read_tail("sweep.log"), "sweep.log", "not a regular file")
    _refused(lambda: RunFolder(run).read_json("other.json"), "other.json", "not a regular file")


def test_a_link_to_a_proc_file_is_refused(run: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PRFAAS_TEST_ENV_SECRET", SECRET)
    (run / "run.log").unlink()
    (run / "run.log").symlink_to("/proc/self/environ")
    _refused(lambda: RunFolder(run).read_tail("run.log"), "run.log", "symbolic link")


def test_a_hard_link_is_refused(run: Path, secret: Path) -> None:
    os.link(secret, run / "linked.html")
    _refused(lambda: RunFolder(run).read_bytes("linked.html"), "linked.html", "2 hard links")


def test_an_oversized_file_is_refused_before_it_is_read(run: Path) -> None:
    with open(run / "big.json", "wb") as handle:  # sparse: takes no disk
        handle.truncate(MAX_RUN_JSON_BYTES + 1)
    _refused(lambda: RunFolder(run).read_json("big.json"), "big.json", f"{MAX_RUN_JSON_BYTES:,}-byte cap")


def test_only_the_tail_of_a_huge_log_is_read(run: Path) -> None:
    with open(run / "run.log", "wb") as handle:
        handle.truncate(10 << 30)  # 10 GiB of NULs, sparse
        handle.seek(0, os.SEEK_END)
        handle.write(b"\nthe last line\n")
    tail = RunFolder(run).read_tail("run.log")
    assert tail.endswith("the last line\n") and len(tail.encode()) <= MAX_LOG_TAIL_BYTES


def test_json_nested_100000_deep_is_refused_in_one_line(run: Path) -> None:
    (run / "summary.json").write_text("[" * 100_000 + "]" * 100_000)
    text = _refused(lambda: RunFolder(run).read_json("summary.json"), "summary.json",
                    f"deeper than {MAX_RUN_JSON_DEPTH}")
    assert issubclass(RunFileError, TelemetryError) and text.count(": ") >= 1


def test_json_that_is_not_json_is_named_not_echoed(run: Path) -> None:
    (run / "summary.json").write_text(f"{SECRET} is not json")
    _refused(lambda: RunFolder(run).read_json("summary.json"), "summary.json", "not JSON")


@pytest.mark.parametrize("name", ["../outside/secret.txt", "/etc/passwd", "a/../../x.json", "", ".",
                                  "sub/./x.json", "x\0.json"])
def test_a_name_that_leaves_the_folder_is_refused(run: Path, secret: Path, name: str) -> None:
    _refused(lambda: RunFolder(run).read_bytes(name), "name")
    _refused(lambda: RunFolder(run.parent, name).read_bytes("summary.json"), "name")


def test_an_unknown_kind_of_file_is_refused(run: Path, secret: Path) -> None:
    (run / "id_rsa").write_text(SECRET)
    _refused(lambda: RunFolder(run).read_bytes("id_rsa"), "id_rsa", "not a kind of file")


def test_a_missing_file_or_folder_is_named(tmp_path: Path, run: Path) -> None:
    _refused(lambda: RunFolder(run).read_json("nope.json"), "nope.json", "does not exist")
    _refused(lambda: RunFolder(tmp_path / "gone").read_json("summary.json"), "gone", "does not exist")


def test_parquet_is_read_through_the_open_file(run: Path) -> None:
    table = pa.table({"a": [1, 2, 3]})
    pq.write_table(table, run / "requests.parquet")
    assert RunFolder(run).read_parquet("requests.parquet").equals(table)
    (run / "timeseries.parquet").write_bytes(f"PAR1 {SECRET}".encode())
    _refused(lambda: RunFolder(run).read_parquet("timeseries.parquet"), "timeseries.parquet", "not a readable parquet")


def test_list_folders_names_links_but_never_follows_them(tmp_path: Path, run: Path) -> None:
    runs = tmp_path / "runs"
    (runs / "alias").symlink_to(run)
    (runs / "note.txt").write_text("not a folder")
    (runs / "dangling").symlink_to(tmp_path / "nowhere")
    assert list_folders(runs) == (["r1"], ["alias"])


def test_a_parquet_footer_over_the_row_cap_is_refused_before_decoding(run: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    pq.write_table(pa.table({"a": [1, 2, 3]}), run / "requests.parquet")
    monkeypatch.setattr("emulator.telemetry.run_files.MAX_PARQUET_ROWS", 2)  # 16 M rows are too many to write here
    _refused(lambda: RunFolder(run).read_parquet("requests.parquet"), "requests.parquet", "states 3 rows")
