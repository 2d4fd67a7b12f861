"""`python -m emulator validate|schema` as a user runs them: exit 0 or 2, one `error:` line per
problem on stderr, never a traceback."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from emulator.scenario.shared_data import shared_dir

pytestmark = pytest.mark.live  # every test here starts a process

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


def _trace_scenario(tmp_path: Path, lines: list[str]) -> Path:
    """mooncake-replay.yaml reading `lines` as its trace, from tmp_path."""
    (tmp_path / "t.jsonl").write_text("\n".join(lines))
    doc = (REPO / "scenarios" / "mooncake-replay.yaml").read_text().replace(
        "../../shared/traces/mooncake_synthetic_trace.jsonl", "t.jsonl")
    (tmp_path / "s.yaml").write_text(doc)
    return tmp_path / "s.yaml"


SHARED_TRACE = shared_dir() / "traces" / "mooncake_synthetic_trace.jsonl"


def test_validate_reads_every_trace_row_and_names_bad_ones_by_line(tmp_path):
    lines = SHARED_TRACE.read_text().splitlines()[:40]
    negative = json.loads(lines[9])
    negative["input_length"] = -5
    missing = json.loads(lines[19])
    del missing["output_length"]
    lines[9], lines[19], lines[-1] = json.dumps(negative), json.dumps(missing), lines[-1][:50]
    path = _trace_scenario(tmp_path, lines)
    out = emulator("validate", str(path))
    trace = tmp_path / "t.jsonl"
    assert out.returncode == 2 and out.stdout == "" and "Traceback" not in out.stderr
    assert out.stderr.splitlines() == [
        f"error: trace {trace} line 10: input_length: not a whole number in 0..1048576; fix the row",
        f"error: trace {trace} line 20: output_length: missing; every row needs timestamp, input_length, "
        "output_length, hash_ids",
        f"error: trace {trace} line 40: not JSON (Unterminated string starting at); write one object per line",
        f"error: trace {trace}: 3 bad of 40 rows; fix them, or set workload.trace.bad_rows: skip to replay the rest",
    ]
    skipping = emulator("validate", str(path), "--set", "workload.trace.bad_rows=skip")
    assert skipping.returncode == 0, skipping.stderr
    assert skipping.stdout.splitlines()[-2:] == [f"trace {trace}: 37 of 40 rows read",
                                                 "ok: mooncake-replay (virtual, 0 timeline events)"]


def test_validate_says_how_many_rows_a_good_trace_holds():
    out = emulator("validate", "scenarios/mooncake-replay.yaml")
    assert out.returncode == 0
    assert out.stdout.splitlines()[0].endswith("mooncake_synthetic_trace.jsonl: 3,993 rows read")


def test_a_capped_replay_says_so_in_the_cli_output_and_the_summary(tmp_path):
    out = emulator("run", "scenarios/mooncake-replay.yaml", "--out", str(tmp_path / "run"),
                   "--set", "workload.max_requests=200")
    assert out.returncode == 0, out.stderr
    statement = ("replaying 200 of 3,993 rows of mooncake_synthetic_trace.jsonl (mooncake): "
                 "workload.max_requests = 200")
    assert f"  workload: {statement}" in out.stdout.splitlines()
    meta = json.loads((tmp_path / "run" / "summary.json").read_text())["meta"]
    assert meta["workload"]["statement"] == statement
    assert (meta["workload"]["num_requests"], meta["workload"]["num_rows"]) == (200, 3993)


def test_every_bad_override_is_reported_not_only_the_first():
    out = emulator("validate", "scenarios/paper-case-study.yaml", "--set", "routr.x=1", "--set", "bad",
                   "--set", "router.threshold_tokens=-5")
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert [line.split(":")[1].strip() for line in out.stderr.splitlines()] == [
        "--set routr", "--set bad", "router.threshold_tokens"]


def test_a_mooncake_trace_needs_its_own_block_size():
    out = emulator("validate", "scenarios/mooncake-replay.yaml", "--set", "prefix_cache.block_tokens=64")
    assert out.returncode == 2 and out.stderr == (
        "error: prefix_cache.block_tokens: 64, but a Mooncake trace's hash_ids each stand for 512 tokens; "
        "set prefix_cache.block_tokens: 512 so shared prefixes mean what the trace says\n")


def test_yaml_booleans_are_true_and_false_only():
    """`off` is an affinity, not YAML 1.1's False; `yes` is no boolean (YAML 1.2)."""
    assert emulator("validate", "scenarios/paper-case-study.yaml", "--set", "router.affinity=off").returncode == 0
    refused = emulator("validate", "scenarios/paper-case-study.yaml", "--set", "scheduler.short_term.enabled=yes")
    assert refused.returncode == 2 and refused.stderr.startswith("error: scheduler.short_term.enabled: 'yes'")
