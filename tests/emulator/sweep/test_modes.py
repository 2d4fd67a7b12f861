"""The configuration axis and capacity mode without Ray: named bundles expand like an axis and their
point scenarios are the paper's baselines; the store's fingerprint follows the bundles and the SLO,
so a directory of another SLO is not resumed."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path

import pytest

from emulator.errors import ScenarioError
from emulator.scenario import apply_overrides
from emulator.sweep import expand, load_sweep
from emulator.sweep.points import point_scenario
from emulator.sweep.store import SweepStore, fingerprint
from emulator.virtual.baselines import CONFIGS, configuration_overrides

PAPER = "configurations: {prfaas: paper, homogeneous: paper, naive: paper}\n"
AXIS = "axes:\n  router.threshold_tokens: {values: [8000, 40000]}\n"


def test_configurations_expand_like_an_axis_named_configuration(write_sweep: Callable[..., Path]) -> None:
    spec = load_sweep(write_sweep(PAPER + AXIS + "seeds: [0, 1]\n")).spec
    points = expand(spec)
    assert spec.num_levels() == 6 and len(points) == 12 and len({p.point_id for p in points}) == 12
    assert spec.axis_names == ["configuration", "router.threshold_tokens"]
    assert all([path for path, _ in p.values] == spec.axis_names for p in points)
    assert sorted({(p.configuration, dict(p.values)["router.threshold_tokens"]) for p in points}) == \
        sorted((c, t) for c in CONFIGS for t in (8000, 40000))
    assert all(p.overrides()[0].startswith("router.threshold_tokens=") for p in points)  # no configuration item


def test_paper_bundles_give_the_baselines_scenarios(write_sweep: Callable[..., Path]) -> None:
    sweep = load_sweep(write_sweep(PAPER + "seeds: [3]\n"))
    base = sweep.base_scenario()
    by_config = {p.configuration: p.point_id for p in expand(sweep.spec)}
    assert list(by_config) == list(CONFIGS)
    for config, pid in by_config.items():
        expected = apply_overrides(base, ["seed=3", *configuration_overrides(base, config)])
        assert point_scenario(sweep, pid) == expected, config
    homogeneous = point_scenario(sweep, by_config["homogeneous"])
    assert homogeneous.clusters.remote.instances == 0 and homogeneous.clusters.local.instances == 12


def test_a_listed_bundle_applies_after_the_axes(write_sweep: Callable[..., Path]) -> None:
    sweep = load_sweep(write_sweep(AXIS + "configurations:\n  on: []\n"
                                   "  off: [scheduler.short_term.enabled=false, scheduler.long_term.enabled=false]\n"))
    for point in expand(sweep.spec):
        scenario = point_scenario(sweep, point.point_id)
        assert scenario.router.threshold_tokens == dict(point.values)["router.threshold_tokens"]
        enabled = point.configuration == "on"
        assert (scenario.scheduler.short_term.enabled, scenario.scheduler.long_term.enabled) == (enabled, enabled)


def test_fingerprint_follows_the_slo_and_the_bundles(write_sweep: Callable[..., Path]) -> None:
    def print_of(body: str) -> str:
        return fingerprint(load_sweep(write_sweep(body)))

    five, six = (print_of(AXIS + f"capacity: {{ttft_p90_s: {slo}}}\n") for slo in (5.0, 6.0))
    assert five != six != print_of(AXIS + "capacity: {ttft_p90_s: 5.0, tpot_mean_s: 0.05}\n")
    assert print_of(AXIS + "configurations: {a: []}\n") != print_of(AXIS + "configurations: {a: [duration_s=30]}\n")
    plain = load_sweep(write_sweep(AXIS))  # a sweep without either keeps its fingerprint from before
    old = hashlib.sha256(json.dumps([plain.base_text, plain.spec.set, plain.spec.metrics]).encode()).hexdigest()[:16]
    assert fingerprint(plain) == old


def test_a_directory_of_another_slo_is_not_resumed(write_sweep: Callable[..., Path], tmp_path: Path) -> None:
    first = load_sweep(write_sweep(AXIS + "capacity: {ttft_p90_s: 5.0}\n", name="a"))
    store = SweepStore(tmp_path / "out", first, expand(first.spec))
    store.add({"point_id": expand(first.spec)[0].point_id, "router.threshold_tokens": 8000, "seed": 0,
               "engine": "virtual", "capacity_rps": 2.0, "status": "ok"})
    store.flush()
    store.write_doc({})
    assert SweepStore(tmp_path / "out", first, expand(first.spec)).num_before == 1
    other = load_sweep(write_sweep(AXIS + "capacity: {ttft_p90_s: 6.0}\n", name="b"))
    with pytest.raises(ScenarioError, match="holds another sweep"):
        SweepStore(tmp_path / "out", other, expand(other.spec))
