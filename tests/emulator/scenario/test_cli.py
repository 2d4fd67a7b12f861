"""`python -m emulator validate|schema` as a user runs them: exit 0 or 2, one `error:` line per
problem on stderr, never a traceback."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[3]


def emulator(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "emulator", *args], cwd=REPO,
                          capture_output=True, text=True, timeout=120)


def test_validate_a_good_file():
    out = emulator("validate", "scenarios/classroom-basic.yaml")
    assert (out.returncode, out.stderr) == (0, "")
    assert out.stdout == "ok: classroom-basic (live, 2 timeline events)\n"


def test_validate_prints_every_problem_on_its_own_line(tmp_path):
    doc = yaml.safe_load((REPO / "scenarios" / "paper-case-study.yaml").read_text())
    doc["routr"] = {}
    doc["workload"]["arrival"]["rate_per_s"] = -1
    doc["clusters"]["local"]["device"] = "H20"
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(doc))
    out = emulator("validate", str(path))
    lines = out.stderr.splitlines()
    assert out.returncode == 2 and out.stdout == ""
    assert sorted(line.split(":")[1].strip() for line in lines) == [
        "clusters.local.device", "routr", "workload.arrival.rate_per_s"]
    assert all(line.startswith("error: ") for line in lines) and "Traceback" not in out.stderr


def test_validate_with_a_bad_override_and_a_missing_file(tmp_path):
    out = emulator("validate", "scenarios/paper-case-study.yaml",
                   "--set", "clusters.local.prefill_instances=8")
    assert out.returncode == 2 and out.stderr == (
        "error: clusters.local.prefill_instances: 8 must be below clusters.local.instances (8); "
        "lower it\n")
    missing = emulator("validate", str(tmp_path / "nope.yaml"))
    assert missing.returncode == 2
    assert missing.stderr == f"error: {tmp_path / 'nope.yaml'}: file not found; check the path\n"


def test_validate_a_yaml_syntax_error(tmp_path):
    path = tmp_path / "broken.yaml"
    path.write_text("name: x\nclusters: {remote: [1, 2}\n")
    out = emulator("validate", str(path))
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert out.stderr.count("\n") == 1
    assert out.stderr.startswith(f"error: {path}:2: YAML syntax error")


def test_schema_prints_the_json_schema():
    out = emulator("schema")
    assert out.returncode == 0
    schema = json.loads(out.stdout)
    sections = {"model", "clusters", "link", "router", "workload", "timeline", "expect"}
    assert sections <= set(schema["properties"])
