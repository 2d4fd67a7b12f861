"""Sweep files: each problem is one line naming the field and the fix; the shipped sweeps load."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from emulator.__main__ import main
from emulator.errors import ScenarioError
from emulator.paths import REPO_ROOT
from emulator.sweep import load_sweep

GRID = "axes:\n  router.threshold_tokens: {values: [8000, 16000]}\n"
CAPACITY = GRID + "capacity: {ttft_p90_s: 5.0}\n"


@pytest.mark.parametrize(("body", "words"), [
    (GRID + "colour: red\n", ["colour", "unknown field"]),
    (GRID + "mode: lhs\n", ["samples"]),
    (GRID + "samples: 5\n", ["samples", "mode"]),
    (GRID + "mode: sobol\n", ["mode", "grid"]),
    (GRID + "mode: oat\n", ["axes.router.threshold_tokens", "add center"]),
    ("axes:\n  router.threshold_tokens: {values: [8000], center: 8000}\n", ["center", "mode oat"]),
    (GRID + "engines: [virtual, live]\n", ["engines.1"]),
    (GRID + "seeds: [0, 0]\n", ["seeds", "repeats"]),
    (GRID + "seeds: [-1]\n", ["seeds.0"]),
    (GRID + "metrics: [ttft_p50_s, happiness]\n", ["metrics", "happiness"]),
    ("axes:\n  router.threshold_tokens: {values: [1], range: {start: 1, stop: 2, step: 1}}\n",
     ["router.threshold_tokens", "exactly one"]),
    ("axes:\n  workload.arrival.rate_per_s: {range: {start: 1, stop: 2}}\n", ["rate_per_s.range", "step"]),
    ("axes:\n  workload.arrival.rate_per_s: {range: {start: 3, stop: 2, step: 1}}\n", ["range", "swap"]),
    ("axes:\n  workload.arrival.rate_per_s: {log_range: {start: 0, stop: 2, num: 3}}\n", ["log_range.start"]),
    ("axes:\n  a: {range: {start: 0, stop: 1000, step: 0.001}}\n", ["levels", "step"]),
    ("axes:\n  a: {values: [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]}\n  b: {values: [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]}\n"
     "  c: {values: [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]}\n  d: {values: [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]}\n"
     "seeds: [0, 1]\n", ["20,000 points", "fewer"]),
    ("axes:\n  seed: {values: [1, 2]}\n", ["seed", "seeds"]),
    ("axes:\n  router.colour: {values: [1]}\n", ["axes.router.colour", "unknown path"]),
    ("axes: {}\n", ["axes"]),
    ("axes: [1, 2\n", ["YAML syntax error", "line"]),
    (GRID + "capacity: {ttft_p90_s: 0}\n", ["capacity.ttft_p90_s", "greater than 0"]),
    (GRID + "capacity: {ttft_p90_s: 5.0, tpot_mean_s: 1.0e9}\n", ["capacity.tpot_mean_s"]),
    (GRID + "capacity: {ttft_p90_s: 5.0, max_probes: 0}\n", ["capacity.max_probes"]),
    (GRID + "capacity: {ttft_p90_s: 5.0, num_requests: 10}\n", ["capacity.num_requests"]),
    (GRID + "capacity: {ttft_p90_s: 5.0, slo: 3}\n", ["capacity.slo", "unknown field"]),
    (CAPACITY + "metrics: [capacity_rps, ttft_p90_s]\n", ["metrics", "ttft_p90_s", "capacity mode"]),
    (GRID + "metrics: [capacity_rps]\n", ["metrics", "capacity_rps", "add a capacity: section"]),
    ("axes:\n  workload.arrival.rate_per_s: {values: [1.0]}\ncapacity: {ttft_p90_s: 5.0}\n",
     ["axes.workload.arrival.rate_per_s", "capacity mode"]),
    ("configurations: {fast: paper}\n", ["configurations.fast", "prfaas, homogeneous, naive"]),
    ("configurations: {x: [router.colour=1]}\n", ["configurations.x", "router.colour", "unknown path"]),
    ("configurations: {x: [router.policy=sideways]}\n", ["configurations.x", "router.policy"]),
    ("configurations: {x: [oops]}\n", ["configurations.x", "path=value"]),
    (GRID + "configurations: {x: [router.threshold_tokens=5]}\n",
     ["configurations.x", "router.threshold_tokens", "one place"]),
    ("configurations: {Big: []}\n", ["configurations.Big", "pattern"]),
    ("configurations: {}\n", ["configurations"]),
    ("configurations: {a: []}\nmode: lhs\nsamples: 3\n", ["mode lhs", "axes"]),
    ("axes:\n  configuration: {values: [1]}\n", ["configuration", "configurations:"]),
])
def test_problem_is_one_line_naming_the_field(write_sweep: Callable[..., Path], body: str, words: list[str]) -> None:
    with pytest.raises(ScenarioError) as caught:
        load_sweep(write_sweep(body))
    message = str(caught.value)
    assert len(message.splitlines()) == 1, message
    assert all(word in message for word in words), message


def test_base_outside_the_readable_folders_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text("name: s\nbase: /etc/hostname\naxes:\n  seed_x: {values: [1]}\n")
    with pytest.raises(ScenarioError, match="^base: /etc/hostname lies outside"):
        load_sweep(path)


@pytest.mark.parametrize(("name", "num_points"), [("threshold-load", 36), ("capacity-slo", 9)])
def test_shipped_sweep_loads_and_validates(capsys: pytest.CaptureFixture[str], name: str, num_points: int) -> None:
    path = REPO_ROOT / "scenarios" / "sweeps" / f"{name}.yaml"
    sweep = load_sweep(path)
    assert sweep.spec.num_levels() * len(sweep.spec.seeds) == num_points
    assert main(["validate", str(path)]) == 0
    assert f"ok: {name} (sweep, {num_points} points)" in capsys.readouterr().out


def test_capacity_mode_metrics_default_to_the_capacity_figures(write_sweep: Callable[..., Path]) -> None:
    from emulator.sweep.spec import CAPACITY_DEFAULT_METRICS, CAPACITY_METRICS

    assert load_sweep(write_sweep(CAPACITY)).spec.metrics == list(CAPACITY_METRICS)
    both = load_sweep(write_sweep(CAPACITY + "engines: [virtual, analytic]\n")).spec
    assert both.metrics == list(CAPACITY_DEFAULT_METRICS) and "lambda_max" in both.metrics
    given = load_sweep(write_sweep(CAPACITY + "metrics: [capacity_rps, lambda_max]\n")).spec
    assert given.metrics == ["capacity_rps", "lambda_max"]


def test_cli_bad_sweep_exits_2_with_one_line(write_sweep: Callable[..., Path],
                                             capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["sweep", str(write_sweep(GRID + "mode: lhs\n")), "--out", "/nonexistent/x"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and "samples" in err[0]


@pytest.mark.parametrize(("args", "words"), [
    (["--workers", "0"], ["--workers 0", "use 1 to"]),
    (["--workers", "2", "--ray", "127.0.0.1:1"], ["--workers 2", "drop --workers"]),
])
def test_cli_bad_ray_options_exit_2_with_one_line(write_sweep: Callable[..., Path], tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str], args: list[str],
                                                  words: list[str]) -> None:
    assert main(["sweep", str(write_sweep(GRID)), "--out", str(tmp_path / "out"), *args]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and err[0].startswith("small: 2 points")  # the plan line, then the error
    assert err[1].startswith("error: ") and all(word in err[1] for word in words), err
    assert not (tmp_path / "out").exists()
