"""The control plane of one run, built from its scenario in ONE place for every engine.

The live gateway and the virtual engine both call `make_control_plane`, so they run the same
Router, PrefixCacheIndex and DualTimescaleScheduler objects with the same settings; only the
clock that feeds them differs.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from emulator.control.control_state import ControlState, whole_threshold
from emulator.control.curve import ClusterCurves, Curve
from emulator.control.prefix_cache import PrefixCacheIndex
from emulator.control.router import PrefillEstimate, Router, RouterConfig
from emulator.control.scheduler import DualTimescaleScheduler, SchedulerConfig
from emulator.control.throughput_model import ModelInputs, Plan, homogeneous_baseline, optimize
from emulator.control.types import Cluster, RequestSpec, RoutePolicy
from emulator.plane.inputs import MIB, model_inputs
from emulator.scenario import Scenario


@dataclass(frozen=True, slots=True)
class ControlPlane:
    state: ControlState  # the one owner of what knobs and the scheduler change while the run goes
    router: Router
    index: PrefixCacheIndex
    scheduler: DualTimescaleScheduler | None  # None when both loops are off or no threshold applies
    inputs: ModelInputs
    plan: Plan
    threshold: int  # the starting t (the optimizer's when the scenario says auto)
    n_p: int  # the starting number of local prefill instances
    profile_source: str


def cache_geometry(inputs: ModelInputs, block_tokens: int) -> tuple[int, int]:
    """(KV bytes per block, bytes of one state snapshot) from S_kv(l) = state + per_token * l,
    read off the profile's first segment."""
    xs = inputs.kv_bytes.xs
    per_token = (inputs.kv_bytes(xs[1]) - inputs.kv_bytes(xs[0])) / (xs[1] - xs[0])
    state = inputs.kv_bytes(xs[0]) - per_token * xs[0]
    return max(1, round(per_token * block_tokens)), max(1, round(state))


def scheduler_config(scenario: Scenario) -> SchedulerConfig:
    short, long = scenario.scheduler.short_term, scenario.scheduler.long_term
    return SchedulerConfig(
        short_term_enabled=short.enabled, short_interval_s=short.interval_s,
        egress_util_trigger=short.egress_util_trigger, queue_depth_trigger=short.queue_depth_trigger,
        hysteresis=short.hysteresis, long_term_enabled=long.enabled, long_interval_s=long.interval_s,
    )


def make_control_plane(scenario: Scenario, *, requests: list[RequestSpec] | None = None) -> ControlPlane:
    """`requests`: the scenario's build_requests(scenario), when the caller has them already (a
    trace's requests are the optimizer's length sample; passing them saves reading it again)."""
    inputs, tables = model_inputs(scenario, requests)
    plan = optimize(inputs)
    spec = scenario.router
    auto = whole_threshold(plan.prfaas.t)
    threshold = auto if spec.threshold_tokens == "auto" else spec.threshold_tokens
    n_p = start_n_p(scenario, inputs, plan)
    loops = scenario.scheduler
    state = ControlState(RouterConfig(spec.policy, threshold, spec.prefix_rule, spec.affinity),
                         auto_threshold=auto, short_term_enabled=loops.short_term.enabled,
                         long_term_enabled=loops.long_term.enabled)
    router = Router(state.router, _index(scenario, inputs), state, prefill_s=prefill_estimate(inputs),
                    seed=scenario.seed)
    wants_scheduler = spec.policy is RoutePolicy.PRFAAS and state.is_scheduling
    scheduler = (DualTimescaleScheduler(inputs, scheduler_config(scenario), n_p=n_p, state=state)
                 if wants_scheduler else None)
    return ControlPlane(state, router, router.index, scheduler, inputs, plan, threshold, n_p, tables.source)


def prefill_estimate(inputs: ModelInputs) -> PrefillEstimate:
    """T_prefill(tokens) of one instance of a cluster, from the profile with its speed factor: the
    cost the virtual engine charges, and the router's estimate on both engines."""
    return ClusterCurves(Curve.from_table(inputs.prefill_remote_s), Curve.from_table(inputs.prefill_local_s))


def start_n_p(scenario: Scenario, inputs: ModelInputs, plan: Plan) -> int:
    """Local prefill instances at the start: the scenario's (0 included), else the best split for
    the policy: PrfaaS's optimum, the best homogeneous split of the local cluster, or none at all
    when every prefill goes remote."""
    n_p = scenario.clusters.local.prefill_instances
    if n_p is not None:
        return n_p
    policy = scenario.router.policy
    if policy is RoutePolicy.ALL_REMOTE:
        return 0
    if policy is RoutePolicy.LOCAL_ONLY:
        return homogeneous_baseline(dataclasses.replace(inputs, num_baseline=inputs.num_local)).n_p
    return plan.prfaas.n_p


def _index(scenario: Scenario, inputs: ModelInputs) -> PrefixCacheIndex:
    block_tokens = scenario.prefix_cache.block_tokens
    kv_per_block, state_bytes = cache_geometry(inputs, block_tokens)
    capacity = scenario.prefix_cache.capacity_mib
    return PrefixCacheIndex(block_tokens, kv_per_block, state_bytes,
                            {Cluster.REMOTE: int(capacity.remote * MIB), Cluster.LOCAL: int(capacity.local * MIB)})
