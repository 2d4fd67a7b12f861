"""Every number a scenario brings in is bounded by the schema (emulator/limits.py), YAML floats in
exponent form are numbers, and malformed input (deep nesting, device files, FIFOs, huge files) ends
as one ScenarioError line, never a traceback, a hang or a runaway run."""

from __future__ import annotations

import copy
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from emulator import limits
from emulator.errors import ScenarioError
from emulator.scenario import apply_overrides, load_scenario, parse_scenario

REPO = Path(__file__).resolve().parents[3]
SCENARIOS = REPO / "scenarios"
CASE_STUDY = yaml.safe_load((SCENARIOS / "paper-case-study.yaml").read_text())
QUICKSTART = yaml.safe_load((SCENARIOS / "live-quickstart.yaml").read_text())
HUGE = int("9" * 400)


def first_line(doc: dict) -> str:
    with pytest.raises(ScenarioError) as err:
        parse_scenario(doc, SCENARIOS)
    return str(err.value).splitlines()[0]


def edited(base: dict, dotted: str, value) -> dict:
    doc = copy.deepcopy(base)
    *parents, last = dotted.split(".")
    node = doc
    for part in parents:
        node = node[int(part)] if isinstance(node, list) else node.setdefault(part, {})
    node[last] = value
    return doc


# (document, dotted field, a value above its bound, the bound the hint must quote)
ABOVE = [
    ("case", "router.threshold_tokens", HUGE, limits.MAX_TOKENS),
    ("case", "router.threshold_tokens", 10**23, limits.MAX_TOKENS),
    ("case", "clusters.local.decode_max_batch", 1_000_000_000, limits.MAX_DECODE_BATCH),
    ("case", "workload.input_len.max", 2_000_000_000, limits.MAX_TOKENS),
    ("quick", "workload.input_len.max", 2_000_000_000, limits.MAX_TOKENS),
    ("quick", "workload.output_len.tokens", limits.MAX_OUTPUT_TOKENS + 1, limits.MAX_OUTPUT_TOKENS),
    ("case", "clusters.remote.instances", 100_000, limits.MAX_INSTANCES),
    ("case", "clusters.local.instances", 100_000, limits.MAX_INSTANCES),
    ("case", "clusters.baseline_instances", 100_000, 2 * limits.MAX_INSTANCES),
    ("case", "clusters.local.speed_factor", 1e9, limits.MAX_SPEED_FACTOR),
    ("case", "clusters.remote.devices", [0, 1, 2, limits.MAX_GPUS], limits.MAX_GPUS - 1),
    ("case", "duration_s", 1e12, limits.MAX_DURATION_S),
    ("case", "seed", 2**40, limits.MAX_SEED),
    ("case", "workload.arrival.rate_per_s", 1e9, limits.MAX_RATE_PER_S),
    ("case", "workload.max_requests", 10**9, limits.MAX_REQUESTS),
    ("case", "link.bandwidth_mbit", 1e9, 100_000),
    ("case", "scheduler.short_term.interval_s", 1e9, limits.MAX_INTERVAL_S),
    ("case", "scheduler.long_term.interval_s", 1e9, limits.MAX_INTERVAL_S),
    ("case", "scheduler.short_term.queue_depth_trigger", 10**12, limits.MAX_REQUESTS),
    ("case", "prefix_cache.capacity_mib.remote", 1e30, limits.MAX_CACHE_MIB),
    ("case", "prefix_cache.block_tokens", 10**12, limits.MAX_TOKENS),
    ("case", "model.profile.kv_mib", [190.8, 308.9, 701.3, 1e30], limits.MAX_KV_MIB),
    ("case", "model.profile.prefill_s.h20", [1.0, 1.5, 5.0, 1e30], limits.MAX_STEP_S),
    ("case", "model.profile.decode_step_ms.h20", 1e30, limits.MAX_STEP_S * 1000),
    ("case", "model.profile.lengths_tokens", [1024, 8192, 32768, 10**12], limits.MAX_TOKENS),
    ("case", "timeline", [{"at_s": 1, "burst": {"requests": 10**12}}], limits.MAX_REQUESTS),
    ("case", "timeline", [{"at_s": 1e30, "burst": {"requests": 1}}], limits.MAX_DURATION_S),
    ("case", "expect", {"kv_bytes_total": {"max": 1e300}}, limits.MAX_EXPECT),
]


@pytest.mark.parametrize("base, field, value, bound", ABOVE,
                         ids=[f"{a[1]}={str(a[2])[:12]}" for a in ABOVE])
def test_a_value_above_its_bound_is_refused_with_the_bound(base, field, value, bound):
    doc = edited(CASE_STUDY if base == "case" else QUICKSTART, field, value)
    line = first_line(doc)
    assert line.startswith(field.split(".")[0]), line
    shown = {str(bound), f"{bound:,}", f"{bound:g}", f"{bound:,.0f}", str(int(bound))}
    assert any(text in line for text in shown), line


def test_every_shipped_scenario_fits_the_bounds():
    for path in SCENARIOS.glob("*.yaml"):
        load_scenario(path)


def test_a_400_digit_threshold_from_set_is_refused():
    s = load_scenario(SCENARIOS / "live-quickstart.yaml")
    with pytest.raises(ScenarioError, match=r"^--set router\.threshold_tokens: an integer of more than"):
        apply_overrides(s, [f"router.threshold_tokens={HUGE}"])
    with pytest.raises(ScenarioError, match=r"^router\.threshold_tokens: .*at most 1,048,576"):
        apply_overrides(s, [f"router.threshold_tokens={10**23}"])


def test_a_5000_digit_integer_is_one_line(tmp_path):
    path = tmp_path / "s.yaml"
    text = (SCENARIOS / "live-quickstart.yaml").read_text()
    line = text.splitlines().index("duration_s: 45") + 1
    path.write_text(text.replace("duration_s: 45", "duration_s: " + "9" * 5000))
    with pytest.raises(ScenarioError) as err:
        load_scenario(path)
    assert "\n" not in str(err.value) and str(err.value).startswith(f"{path}:{line}: an integer of more than")


@pytest.mark.parametrize("text, expected", [("1e2", 100.0), ("1.5e1", 15.0), ("2.5E+1", 25.0),
                                            (".5e2", 50.0), ("-1e-3", -0.001)])
def test_exponent_floats_are_numbers_in_files_and_set(tmp_path, text, expected):
    s = load_scenario(SCENARIOS / "paper-case-study.yaml")
    doc = apply_overrides(s, ["workload.arrival.rate_per_s=2e0", f"expect.ttft_p50_s={{max: {text}}}"])
    assert doc.workload.arrival.rate_per_s == 2.0
    assert doc.expect["ttft_p50_s"].max == expected
    path = tmp_path / "s.yaml"
    path.write_text((SCENARIOS / "paper-case-study.yaml").read_text().replace(
        "rate_per_s: 2.0", f"rate_per_s: {text.lstrip('-')}"))
    assert load_scenario(path).workload.arrival.rate_per_s == abs(expected)


@pytest.mark.parametrize("text", ["1e12", "1.0e308"])
def test_a_huge_exponent_float_is_refused_as_too_large_not_as_text(text):
    s = load_scenario(SCENARIOS / "paper-case-study.yaml")
    with pytest.raises(ScenarioError) as err:
        apply_overrides(s, [f"duration_s={text}"])
    assert "valid number" not in str(err.value) and "at most" in str(err.value)


def test_deeply_nested_yaml_file_is_one_line(tmp_path):
    path = tmp_path / "deep.yaml"
    path.write_text("name: x\nduration_s: " + "[" * 100_000 + "]" * 100_000 + "\n")
    with pytest.raises(ScenarioError) as err:
        load_scenario(path)
    assert "\n" not in str(err.value) and f"{limits.MAX_NESTING}" in str(err.value)


def test_deeply_nested_set_value_is_one_line():
    s = load_scenario(SCENARIOS / "live-quickstart.yaml")
    with pytest.raises(ScenarioError) as err:
        apply_overrides(s, ["duration_s=" + "[" * 100_000 + "]" * 100_000])
    assert "\n" not in str(err.value) and str(err.value).startswith("--set duration_s")


def test_a_device_file_is_refused_before_reading():
    with pytest.raises(ScenarioError, match=r"^/dev/zero: not a regular file"):
        load_scenario("/dev/zero")


@pytest.mark.live
def test_a_fifo_is_refused_without_hanging(tmp_path):
    fifo = tmp_path / "s.yaml"
    os.mkfifo(fifo)
    code = ("from emulator.scenario import load_scenario\n"
            "from emulator.errors import ScenarioError\n"
            f"try:\n load_scenario({str(fifo)!r})\nexcept ScenarioError as e:\n print(e)\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True,
                         timeout=60)
    assert "not a regular file" in out.stdout


def test_a_file_over_the_size_cap_is_refused_before_reading(tmp_path):
    path = tmp_path / "big.yaml"
    with open(path, "wb") as handle:  # sparse: 200 MB on paper, no disk
        handle.truncate(200 * 1024 * 1024)
    started = time.monotonic()
    with pytest.raises(ScenarioError, match=f"larger than {limits.MAX_SCENARIO_BYTES:,} bytes"):
        load_scenario(path)
    assert time.monotonic() - started < 30  # reading it took over 60 s before


def test_a_threshold_above_every_input_is_a_warning():
    from emulator.scenario.rules import scenario_warnings

    s = apply_overrides(load_scenario(SCENARIOS / "live-quickstart.yaml"),
                        ["router.threshold_tokens=5000"])
    warnings = scenario_warnings(s)
    assert len(warnings) == 1 and warnings[0].startswith(
        "router.threshold_tokens: 5000 is above the longest input the workload can produce (4096)")
    assert scenario_warnings(load_scenario(SCENARIOS / "live-quickstart.yaml")) == []


@pytest.mark.live
def test_validate_prints_the_threshold_warning():
    out = subprocess.run([sys.executable, "-m", "emulator", "validate", "scenarios/classroom-basic.yaml",
                          "--set", "timeline.1.set={router.threshold_tokens: 9000}"],
                         cwd=REPO, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[0].startswith(
        "warning: timeline.1.set.router.threshold_tokens: 9000 is above the longest input")
