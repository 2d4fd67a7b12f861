"""Fixtures of the virtual engine's tests: the repository's scenarios and a small one to vary."""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from emulator.scenario import Scenario, load_scenario, parse_scenario

ROOT = Path(__file__).resolve().parents[3]
SCENARIOS = ROOT / "scenarios"

# Two remote and four local instances on a linear profile, a 10 Gbit/s link: small and quick, and
# busy enough at 3 req/s that queues, the link and decode batches all matter.
SMALL: dict[str, Any] = {
    "name": "small", "engine": "virtual", "seed": 7, "duration_s": 60,
    "model": {"profile": {"name": "linear", "lengths_tokens": [1000, 100000], "kv_mib": [10.0, 500.0],
                          "prefill_s": {"fast": [0.1, 2.0], "slow": [0.3, 6.0]},
                          "decode_step_ms": {"slow": 20}}},
    "clusters": {"remote": {"instances": 2, "device": "fast"},
                 "local": {"instances": 4, "device": "slow", "prefill_instances": 2, "decode_max_batch": 4}},
    "link": {"bandwidth_mbit": 10000, "delay_ms": 5},
    "router": {"policy": "prfaas", "threshold_tokens": 8000},
    "scheduler": {"short_term": {"enabled": False}, "long_term": {"enabled": False}},
    "workload": {"arrival": {"kind": "poisson", "rate_per_s": 3.0},
                 "input_len": {"kind": "uniform", "min": 500, "max": 40000},
                 "output_len": {"kind": "fixed", "tokens": 50}},
}


@pytest.fixture
def small() -> Callable[..., Scenario]:
    """`small(**changes)`: the SMALL scenario with top-level sections replaced or merged."""

    def make(**changes: Any) -> Scenario:
        doc = copy.deepcopy(SMALL)
        for key, value in changes.items():
            if isinstance(value, dict) and isinstance(doc.get(key), dict):
                doc[key] = {**doc[key], **value}
            else:
                doc[key] = value
        return parse_scenario(doc, ROOT)

    return make


@pytest.fixture(scope="session")
def case_study() -> Scenario:
    return load_scenario(SCENARIOS / "paper-case-study.yaml")
