"""The configurations bench/sim_vs_live.py runs on both engines, and the numbers it reads back.

One base scenario (the live quickstart's hybrid small model, one remote prefill node, one local
prefill and one decode node, 200 Mbit/s and 10 ms one way, prompts of 128-2,048 tokens so that a
2-core machine serves 150 requests in minutes) and, per configuration, what differs: the load, the
link, or a timeline event. Timeline moments are shares of the arrival window, so a configuration
means the same thing at any request count.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from emulator.auto_rate import capacity_per_s as eq6_capacity_per_s
from emulator.plane import make_control_plane
from emulator.scenario import parse_scenario
from emulator.telemetry.recorder import load_run
from emulator.workload.build import build_requests

ROOT = Path(__file__).resolve().parents[1]
THRESHOLD = 1024


def base_document() -> dict[str, Any]:
    return {
        "name": "fidelity", "engine": "live", "seed": 29, "duration_s": 60,
        "model": {"preset": "kimi-linear-mini", "size": "small"},
        "clusters": {"remote": {"instances": 1, "device": "cpu"},
                     "local": {"instances": 2, "device": "cpu", "prefill_instances": 1, "decode_max_batch": 8}},
        "link": {"bandwidth_mbit": 200, "delay_ms": 10},
        "router": {"policy": "prfaas", "threshold_tokens": THRESHOLD},
        "scheduler": {"short_term": {"enabled": False}, "long_term": {"enabled": False}},
        "prefix_cache": {"block_tokens": 64, "capacity_mib": {"remote": 256, "local": 256}},
        "workload": {"arrival": {"kind": "poisson", "rate_per_s": 1.0},
                     "input_len": {"kind": "uniform", "min": 128, "max": 2048},
                     "output_len": {"kind": "fixed", "tokens": 16}},
    }


@dataclass(frozen=True)
class Config:
    """One row of the matrix: `changes` are merged into the base document (dicts merge, the rest
    replaces); `timeline` events carry `at` as a share of the arrival window."""

    name: str
    what: str
    load: float
    changes: dict[str, Any] = field(default_factory=dict)
    timeline: tuple[dict[str, Any], ...] = ()

    def document(self, rate_per_s: float, requests: int) -> dict[str, Any]:
        """The scenario at `rate_per_s`, its arrival window ending just after the `requests`-th
        arrival of its seed, so the run holds exactly that many and idles for none."""
        doc = merged(base_document(), self.changes)
        doc["name"] = f"fidelity-{self.name}"
        doc["workload"]["arrival"]["rate_per_s"] = round(rate_per_s, 4)
        doc["workload"]["max_requests"] = requests
        doc["duration_s"] = 3 * requests / rate_per_s
        arrivals = [r.arrival_s for r in build_requests(parse_scenario(doc, ROOT))]
        if len(arrivals) < requests:
            raise ValueError(f"{self.name}: {len(arrivals)} arrivals in {doc['duration_s']:.0f} s, not {requests}")
        duration_s = doc["duration_s"] = round(arrivals[requests - 1] + 0.1, 1)
        doc["timeline"] = [{"at_s": round(event["at"] * duration_s, 1),
                            **{k: v for k, v in event.items() if k != "at"}} for event in self.timeline]
        return doc


def merged(base: dict[str, Any], changes: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(base)
    for key, value in changes.items():
        out[key] = merged(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


MATRIX: tuple[Config, ...] = (
    Config("load-030", "load 0.3, 200 Mbit/s 10 ms", 0.3),
    Config("load-060", "load 0.6, 200 Mbit/s 10 ms", 0.6),
    Config("load-085", "load 0.85, 200 Mbit/s 10 ms", 0.85),
    Config("link-50", "link 50 Mbit/s, load 0.6", 0.6, {"link": {"bandwidth_mbit": 50}}),
    Config("link-10", "link 10 Mbit/s, load 0.3", 0.3, {"link": {"bandwidth_mbit": 10}}),
    Config("rtt40-loss1", "40 ms RTT, 1 % loss, load 0.45", 0.45, {"link": {"delay_ms": 20, "loss_pct": 1.0}}),
    Config("threshold-step", "threshold 1024 -> 1536 at half, load 0.6", 0.6,
           timeline=({"at": 0.5, "set": {"router.threshold_tokens": 1536}},)),
    Config("bandwidth-drop", "100 -> 10 Mbit/s at a third, short-term scheduler on, load 0.45", 0.45,
           {"link": {"bandwidth_mbit": 100}, "router": {"threshold_tokens": "auto"},
            "scheduler": {"short_term": {"enabled": True, "interval_s": 3}}},
           ({"at": 1 / 3, "link": {"bandwidth_mbit": 10}},)),
    Config("prefill-killed", "remote prefill worker killed at a third, back at half, load 0.6", 0.6,
           timeline=({"at": 1 / 3, "kill": "remote-prefill-0"}, {"at": 0.5, "restart": "remote-prefill-0"})),
)
QUICK = ("load-060", "rtt40-loss1")


def capacity_per_s(profile: dict[str, Any]) -> float:
    """Requests per second the base scenario's workers sustain with `profile`: Eq. 6 with each
    worker on its own core, divided by the profile's measured slowdown with all of them busy."""
    doc = base_document()
    doc.update(engine="virtual", model={"profile": profile})
    scenario = parse_scenario(doc, ROOT)
    capacity = eq6_capacity_per_s(scenario, make_control_plane(scenario))
    slowdown = (profile.get("host") or {}).get("busy_slowdown") or [1.0]
    workers = doc["clusters"]["remote"]["instances"] + doc["clusters"]["local"]["instances"]
    return capacity / float(slowdown[min(workers, len(slowdown)) - 1])


def metrics(run_dir: Path) -> dict[str, Any]:
    """A run's figures as the matrix compares them. Throughput and egress are over the span from
    the first arrival to the last finish (the same span on both engines: the scenario's arrival
    window plus however long the run took to serve what arrived)."""
    requests, _, doc = load_run(run_dir)
    done = requests[requests["status"] == "completed"]
    ttft = done["ttft_s"].dropna().to_numpy(dtype=float)
    tpot = done["tpot_s"].dropna().to_numpy(dtype=float)
    span_s = float(done["finish_s"].max() - requests["arrival_s"].min()) if len(done) else float("nan")
    remote = requests["route"] == "prfaas"
    egress_bits = float(requests.loc[remote, "kv_bytes"].fillna(0).sum()) * 8
    return {
        "requests": int(len(requests)), "completed": int(len(done)),
        "failed": int((requests["status"] == "failed").sum()),
        "ttft_mean_s": float(ttft.mean()) if ttft.size else None,
        **{f"ttft_p{q}_s": float(np.percentile(ttft, q)) if ttft.size else None for q in (50, 90, 99)},
        "tpot_mean_s": float(tpot.mean()) if tpot.size else None,
        "throughput_rps": len(done) / span_s if span_s > 0 else None,
        "remote_share": float(remote.mean()) if len(requests) else None,
        "egress_mbit_s": egress_bits / span_s / 1e6 if span_s > 0 else None,
        "ttfts_s": sorted(round(float(x), 4) for x in ttft),
        "engine": doc.get("meta", {}).get("engine"),
    }

