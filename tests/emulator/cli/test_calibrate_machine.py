"""`python -m emulator calibrate SCENARIO --machine`: exactly one of RUN_DIR or --machine, and a
quick machine calibration of the smallest preset writes a profile file that a scenario names and
the virtual engine runs."""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from emulator.cli import calibrate as calibrate_cli
from emulator.errors import ScenarioError
from emulator.scenario import load_scenario
from emulator.virtual.engine import simulate

REPO = Path(__file__).resolve().parents[3]
QUICKSTART = "scenarios/live-quickstart.yaml"


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    calibrate_cli.add_parser(parser.add_subparsers(dest="command"))
    return parser.parse_args(["calibrate", *argv])


@pytest.mark.parametrize(("argv", "line"), [
    ((QUICKSTART,), "calibrate: neither RUN_DIR nor --machine given; give a recorded run's folder, or --machine"),
    ((QUICKSTART, "runs/x", "--machine"), "calibrate: both RUN_DIR and --machine given"),
    ((QUICKSTART, "runs/x", "--quick"), "calibrate --quick: applies to --machine only"),
    ((QUICKSTART, "--rescale", "p.yaml"), "calibrate: neither RUN_DIR nor --machine given"),
    ((QUICKSTART, "--machine", "--quick", "--rescale", "p.yaml"), "calibrate --rescale: applies to --machine without"),
])
def test_exactly_one_of_a_run_or_the_machine(argv: tuple[str, ...], line: str) -> None:
    with pytest.raises(ScenarioError) as err:
        calibrate_cli.run(parse(*argv))
    assert str(err.value).startswith(line) and "\n" not in str(err.value)


TINY = {
    "name": "tiny", "engine": "live", "seed": 3, "duration_s": 20,
    "model": {"preset": "kimi-linear-mini", "size": "tiny"},
    "clusters": {"remote": {"instances": 1, "device": "cpu"},
                 "local": {"instances": 2, "device": "cpu", "prefill_instances": 1, "decode_max_batch": 4}},
    "link": {"bandwidth_mbit": 200, "delay_ms": 10},
    "router": {"policy": "prfaas", "threshold_tokens": 256},
    "scheduler": {"short_term": {"enabled": False}, "long_term": {"enabled": False}},
    "workload": {"arrival": {"kind": "poisson", "rate_per_s": 2.0},
                 "input_len": {"kind": "uniform", "min": 64, "max": 512},
                 "output_len": {"kind": "fixed", "tokens": 8}},
}


@pytest.mark.live
@pytest.mark.slow
def test_a_quick_machine_calibration_names_a_file_the_virtual_engine_runs(tmp_path: Path) -> None:
    (tmp_path / "tiny.yaml").write_text(yaml.safe_dump(TINY))
    out = subprocess.run([sys.executable, "-m", "emulator", "calibrate", str(tmp_path / "tiny.yaml"), "--machine",
                          "--quick", "--out", str(tmp_path / "profiles" / "tiny.yaml")],
                         cwd=REPO, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].startswith("calibrate --machine: kimi-linear-mini (tiny) on ")
    assert sum(line.startswith("  prefill ") for line in lines) == 4
    assert sum(line.startswith("  decode batch ") for line in lines) == 3  # 1, 2, 4
    assert sum("busy worker" in line for line in lines) == 3  # one per worker process of the live run
    twin = dict(TINY, engine="virtual", model={**TINY["model"], "profile_file": "profiles/tiny.yaml"})
    (tmp_path / "twin.yaml").write_text(yaml.safe_dump(twin))
    scenario = load_scenario(tmp_path / "twin.yaml")
    profile = scenario.model.measured_profile
    assert profile is not None and profile.lengths_tokens == (64, 213, 363, 512)
    assert profile.decode_batch_sizes == (1, 2, 4) and profile.host is not None
    assert len(profile.host.busy_slowdown) == 3 and profile.host.busy_slowdown[0] == 1.0
    assert scenario.model.provenance is not None and scenario.model.provenance.size == "tiny"
    result = simulate(scenario)
    assert result.num_requests > 0 and all(r.status == "completed" for r in result.records)

    rescale = subprocess.run([sys.executable, "-m", "emulator", "calibrate", str(tmp_path / "tiny.yaml"), "--machine",
                              "--rescale", str(tmp_path / "profiles" / "tiny.yaml"), "--out",
                              str(tmp_path / "profiles" / "now.yaml")], cwd=REPO, capture_output=True, text=True,
                             timeout=120)
    assert rescale.returncode == 0, rescale.stderr
    assert rescale.stdout.startswith("reference prefill now ")
    now = yaml.safe_load((tmp_path / "profiles" / "now.yaml").read_text())
    scale = now["measured"]["speed_scale"]
    assert 0.2 <= scale <= 5  # the same machine a minute later
    assert now["model"]["profile"]["prefill_s"]["cpu"] == pytest.approx(
        [t * scale for t in profile.prefill_s["cpu"]], rel=1e-3)
