"""The live engine's meaning of `rate_per_s: auto`: a short calibration of the spawned workers.

Once every worker is up and before the first arrival, all of them are timed at once, so they contend
for the cores as a busy run's workers do: prefill workers prefill two prompts (T_prefill of their
cluster), decode workers take decode steps. emulator/auto_rate.py turns the times into the rate.
If no answer comes within CALIBRATION_TIMEOUT_S the run takes the modelled capacity and says so.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Iterable

from emulator.auto_rate import (
    RateSource,
    ResolvedRate,
    capacity_per_s,
    measured_inputs,
    modelled_rate,
    resolve,
    with_arrival_rate,
)
from emulator.control.profiles import LengthSamples
from emulator.control.types import Cluster, Role
from emulator.limits import MAX_CALIBRATION_TOKENS
from emulator.live.nodes import NodeState
from emulator.plane import ControlPlane
from emulator.scenario import Scenario
from emulator.wire import protocol as p
from emulator.workload.build import LIVE_RATE_HEADROOM, Workload, arrival_horizon_s, build_workload

log = logging.getLogger(__name__)
CALIBRATION_TIMEOUT_S = 60.0
DECODE_STEPS = 8  # a decode worker's steps, on a cache of the shorter prompt; the median is kept
# Tokens: longer prompts are charged by the fitted FLOPs curve, not timed (the `small` preset
# prefills 2,048 tokens in about 1 s on one idle core).
LONGEST_TIMED = 2_048
QUANTILES = (0.1, 0.75)  # of the workload's input lengths: the two prompts timed


def calibration_lengths(lengths: LengthSamples) -> list[int]:
    """Two prompt lengths that span the workload, the longer at most LONGEST_TIMED tokens and the
    shorter at most a quarter of it (two points far apart fit the fixed and per-FLOP cost)."""
    longer = max(4, min(LONGEST_TIMED, MAX_CALIBRATION_TOKENS, round(lengths.quantile(QUANTILES[1]))))
    shorter = max(1, min(round(lengths.quantile(QUANTILES[0])), longer // 4))
    return [shorter, longer]


class Calibration:
    """One round: `calibrate` sent to every node up, their `calibrated` answers collected."""

    def __init__(self, lengths: list[int]) -> None:
        self.lengths = lengths
        self.asked: dict[str, NodeState] = {}
        self._num_asked: dict[str, int] = {}  # prompts each node was asked to time
        self.answers: dict[str, p.Calibrated] = {}
        self._all_in = asyncio.Event()

    def on_answer(self, node: NodeState, msg: p.Calibrated) -> None:
        if len(msg.prefill_s) == self._num_asked.get(node.name):
            self.answers[node.name] = msg
        if self.asked and self.answers.keys() >= self.asked.keys():
            self._all_in.set()

    async def run(self, nodes: Iterable[NodeState], stop: asyncio.Event,
                  timeout_s: float = CALIBRATION_TIMEOUT_S) -> float:
        """Ask every node up at once; wait for all answers, a stop or the timeout. Returns the
        seconds it took."""
        start = time.monotonic()
        for node in nodes:
            is_prefill = node.role is Role.PREFILL
            ask = p.Calibrate(lengths=self.lengths if is_prefill else self.lengths[:1],
                              decode_steps=1 if is_prefill else DECODE_STEPS)
            if node.is_up and await node.send(ask):
                self.asked[node.name], self._num_asked[node.name] = node, len(ask.lengths)
        if self.asked:
            waits = [asyncio.ensure_future(self._all_in.wait()), asyncio.ensure_future(stop.wait())]
            await asyncio.wait(waits, timeout=timeout_s, return_when=asyncio.FIRST_COMPLETED)
            for waiting in waits:
                waiting.cancel()
            if missing := sorted(self.asked.keys() - self.answers.keys()):
                log.warning("calibration: no answer from %s after %.1f s", ", ".join(missing),
                            time.monotonic() - start)
        return time.monotonic() - start

    def slowest(self, cluster: Cluster | None, role: Role) -> p.Calibrated | None:
        """The slowest answer of the nodes in `role` (and `cluster`, when given): a run is held up
        by its slowest worker of a pool."""
        found = [self.answers[name] for name, node in self.asked.items() if name in self.answers
                 and node.role is role and (cluster is None or node.cluster is cluster)]
        if role is Role.DECODE:
            return max(found, key=lambda a: a.decode_step_s, default=None)
        return max(found, key=lambda a: sum(a.prefill_s), default=None)


def measured_rate(scenario: Scenario, plane: ControlPlane, calibration: Calibration,
                  took_s: float) -> tuple[Scenario, ResolvedRate]:
    """AUTO_LOAD of the capacity the answers give; the modelled one, said so, when a pool is missing."""
    remote = calibration.slowest(Cluster.REMOTE, Role.PREFILL)
    local = calibration.slowest(Cluster.LOCAL, Role.PREFILL)
    decode = calibration.slowest(None, Role.DECODE)
    clusters = scenario.clusters
    missing = [pool for pool, gone in (("remote prefill", remote is None and clusters.remote.instances > 0),
                                       ("local prefill", local is None and plane.n_p > 0),
                                       ("decode", decode is None)) if gone]
    if missing:
        scenario, rate = modelled_rate(scenario, plane)
        return scenario, dataclasses.replace(rate, how=f"{rate.how}; no {', '.join(missing)} worker answered "
                                                       "the calibration")
    local, remote = local or remote, remote or local  # a cluster with no prefill worker is charged as the other
    lengths = tuple(calibration.lengths)
    inputs = measured_inputs(scenario, plane, lengths, tuple(local.prefill_s), tuple(remote.prefill_s),
                             decode.decode_step_s)
    timed = ", ".join(f"{n:,}" for n in lengths)
    pools = [f"{_seconds(a.prefill_s)} {name}" for name, a in (("local", local), ("remote", remote))]
    how = (f"timed on the workers at start in {took_s:.1f} s: prefill of {timed} tokens {', '.join(pools)}; "
           f"decode step {decode.decode_step_s * 1e3:.0f} ms")
    return resolve(scenario, capacity_per_s(scenario, plane, inputs), RateSource.MEASURED, how)


async def resolve_live_workload(scenario: Scenario, plane: ControlPlane, nodes: Iterable[NodeState],
                                calibration: Calibration, stop: asyncio.Event) -> tuple[Scenario, Workload]:
    """The scenario at its measured rate and the requests drawn at it, the rate stated in coverage."""
    took_s = await calibration.run(nodes, stop)
    scenario, rate = measured_rate(scenario, plane, calibration, took_s)
    log.info("%s", rate.statement)
    workload = build_workload(scenario, arrival_horizon_s(scenario, headroom=LIVE_RATE_HEADROOM))
    return scenario, dataclasses.replace(workload, coverage=with_arrival_rate(workload.coverage, rate))


def _seconds(values: list[float]) -> str:
    return "/".join(f"{v:.2f}" for v in values) + " s"
