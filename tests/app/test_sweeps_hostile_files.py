"""The Sweeps page against sweep folders a local user planted: a sweep.json naming a secret file as
its sweep file, a link to a sweep folder elsewhere, a nested sweep.json. No secret reaches the page,
no link is followed, and a bad folder is one line, never an exception."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from streamlit.testing.v1 import AppTest

from emulator.paths import REPO_ROOT
from emulator.sweep.store import DOC, PARQUET, SWEEP_KIND

PAGE = REPO_ROOT / "app" / "pages" / "6_Sweeps.py"
SECRET = "TOPSECRET-6b20f9"


def _sweep_dir(path: Path, sweep_file: Path | None = None) -> Path:
    path.mkdir(parents=True)
    doc = {"kind": SWEEP_KIND, "v": 1, "columns": {"axes": [], "metrics": []}, "status": "done"}
    if sweep_file is not None:
        doc["sweep_file"] = str(sweep_file)
    (path / DOC).write_text(json.dumps(doc))
    pq.write_table(pa.table({"point_id": ["p0"], "seed": [0], "engine": ["virtual"], "status": ["ok"]}),
                   path / PARQUET)
    return path


def _page(directory: Path) -> AppTest:
    app = AppTest.from_file(str(PAGE), default_timeout=60).run()
    app.text_input(key="sweeps_dir").set_value(str(directory)).run()
    assert not app.exception, [e.message for e in app.exception]
    return app


def _all_text(app: AppTest) -> str:
    def walk(node):
        yield node
        for child in getattr(node, "children", {}).values():
            yield from walk(child)
    return "\n".join(str(n.proto) for n in walk(app._tree) if getattr(n, "proto", None) is not None)


def test_a_sweep_file_named_by_the_folder_is_not_echoed(tmp_path: Path) -> None:
    shadow = tmp_path / "shadow"
    shadow.write_text(f"root:{SECRET}:19000:0:99999:7:::\ndaemon:*:19000:0:99999:7:::\n")
    app = _page(_sweep_dir(tmp_path / "s", sweep_file=shadow))
    assert SECRET not in _all_text(app)
    assert any("sweep file" in c.value for c in app.caption)


def test_a_folder_of_sweeps_does_not_follow_a_link_and_names_a_nested_one(tmp_path: Path) -> None:
    _sweep_dir(tmp_path / "private" / "theirs")
    root = tmp_path / "sweeps"
    _sweep_dir(root / "mine")
    (root / "linked").symlink_to(tmp_path / "private" / "theirs")
    _sweep_dir(root / "nested")
    (root / "nested" / DOC).write_text("[" * 100_000 + "]" * 100_000)
    app = _page(root)
    assert sorted(app.selectbox(key="sweeps_pick").options) == ["mine", "nested"]
    app.selectbox(key="sweeps_pick").set_value("nested").run()
    assert not app.exception, [e.message for e in app.exception]
    assert any("deeper than" in i.value for i in app.info)
