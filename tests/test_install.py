"""The project is installed (editable, by the Makefile): a process started anywhere, with no
PYTHONPATH, imports this checkout's packages. Spawned workers, relays, the broker and the
dashboard rely on it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.live  # every test here starts a process

ROOT = Path(__file__).resolve().parents[1]

PROBE = """
import json, app, emulator, model_stub
from emulator import paths
print(json.dumps({"files": [m.__file__ for m in (app, emulator, model_stub)], "root": str(paths.REPO_ROOT)}))
"""


def test_a_process_started_elsewhere_imports_this_checkout(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run([sys.executable, "-c", PROBE], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, f"not installed? run `make install-dev`\n{done.stderr[-1500:]}"
    found = json.loads(done.stdout)
    assert found["root"] == str(ROOT)
    assert [Path(f).parent.parent for f in found["files"]] == [ROOT] * 3
