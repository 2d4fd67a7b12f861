"""A scenario turned into the throughput model's inputs (`model_inputs`): the profile tables, the
workload's lengths and the link, the inputs both the control plane and the optimizer start from.

Units are converted here, once: MiB tables to bytes, ms to seconds, Mbit/s to bytes per second,
per-device tables divided by each cluster's speed factor. A preset model without a measured profile
gets one estimated from its FLOPs and cache layout, and the output says so. Nothing is optimized
here (emulator.analytic does that).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from emulator.control.profiles import LengthSamples, PiecewiseLinear
from emulator.control.throughput_model import ModelInputs
from emulator.control.types import RequestSpec
from emulator.errors import ScenarioError
from emulator.scenario import Scenario
from emulator.scenario.workload import EmpiricalLength, FixedLength, LognormalLength, UniformLength
from emulator.workload.build import build_requests, length_distribution
from model_stub.config import get_preset
from model_stub.flops import prefill_flops

MIB = 1 << 20
# A preset's prefill time without a measured profile: FLOPs at this rate. About what the small
# presets reach on one CPU core here (bench/results/model_stub_cpu.json); `calibrate` replaces it.
PRESET_ESTIMATE_FLOPS_PER_S = 50e9
PRESET_LENGTHS = (64, 1024, 4096, 16384, 65536)
UNIFORM_SAMPLES = 4096


@dataclass(frozen=True, slots=True)
class ProfileTables:
    """S_kv(l) and per-device T_prefill(l) and decode step, in bytes and seconds."""

    source: str
    lengths: tuple[float, ...]
    kv_bytes: tuple[float, ...]
    prefill_s: dict[str, tuple[float, ...]]
    decode_step_s: dict[str, float]

    def prefill(self, device: str, speed_factor: float) -> PiecewiseLinear:
        """T_prefill on `device` (the schema guarantees a table) at a cluster's speed factor."""
        return PiecewiseLinear(self.lengths, tuple(s / speed_factor for s in self.prefill_s[device]))


def profile_tables(scenario: Scenario) -> ProfileTables:
    """The scenario's measured profile, or an estimate for a preset (same tables for every device)."""
    profile = scenario.model.measured_profile
    if profile is not None:
        return ProfileTables(
            source=f"profile {profile.name}",
            lengths=tuple(map(float, profile.lengths_tokens)),
            kv_bytes=tuple(m * MIB for m in profile.kv_mib),
            prefill_s={d: tuple(v) for d, v in profile.prefill_s.items()},
            decode_step_s={d: ms / 1e3 for d, ms in profile.decode_step_ms.items()},
        )
    config = get_preset(scenario.model.preset, scenario.model.preset_size)
    rate = PRESET_ESTIMATE_FLOPS_PER_S
    times = tuple(prefill_flops(config, n) / rate for n in PRESET_LENGTHS)
    step = prefill_flops(config, 1, start=1024) * scenario.clusters.local.decode_max_batch / rate
    devices = {scenario.clusters.remote.device, scenario.clusters.local.device}
    return ProfileTables(
        source=f"estimated for preset {config.name} from FLOPs at {rate / 1e9:g} GFLOP/s",
        lengths=tuple(map(float, PRESET_LENGTHS)),
        kv_bytes=tuple(float(config.cache_bytes(n)) for n in PRESET_LENGTHS),
        prefill_s={d: times for d in devices},
        decode_step_s={d: max(step, 1e-3) for d in devices},
    )


@dataclass(frozen=True, slots=True)
class HostCosts:
    """What a profile says beyond the throughput model's inputs, for the virtual engine's nodes:
    the decode step by batch size on the local device (speed factor applied; None: T_decode at
    every size), and the host every worker shares (empty slowdown: none), whose compute takes
    `compute_factor` times the tables' (the costs only: the scheduler's model keeps the tables)."""

    decode_step_by_batch_s: PiecewiseLinear | None
    busy_slowdown: tuple[float, ...]
    host_cores: int
    kv_tail_bytes: PiecewiseLinear | None = None  # the last layer's bytes by input length, if measured
    decode_context: PiecewiseLinear | None = None  # the step's factor by mean prompt length, if measured
    layer_bytes: Callable[[int], tuple[int, ...]] | None = None  # each layer's bytes by length: a preset's own
    compute_factor: float = 1.0


def host_costs(scenario: Scenario) -> HostCosts:
    """The scenario's profile's batch table and host, or neither (a preset estimate has none), and
    the preset's own layer sizes (how a pipelined cache reaches the link), when it names one."""
    profile = scenario.model.measured_profile
    preset = scenario.model.preset
    layers = None if preset is None else get_preset(preset, scenario.model.preset_size).layer_sizes
    if profile is None:
        return HostCosts(None, (), 0, layer_bytes=layers)
    local = scenario.clusters.local
    by_batch = profile.decode_step_ms_by_batch.get(local.device)
    curve = None if by_batch is None else PiecewiseLinear(
        tuple(map(float, profile.decode_batch_sizes)), tuple(ms / 1e3 / local.speed_factor for ms in by_batch))
    host = profile.host
    context = None if not profile.decode_context_tokens else PiecewiseLinear(
        tuple(map(float, profile.decode_context_tokens)), tuple(profile.decode_context_factor))
    tail = None if not profile.kv_tail_mib else PiecewiseLinear(
        tuple(map(float, profile.lengths_tokens)), tuple(mib * MIB for mib in profile.kv_tail_mib))
    return HostCosts(curve, () if host is None else tuple(host.busy_slowdown), 0 if host is None else host.cores,
                     tail, context, layers, 1.0 if host is None else host.compute_factor)


def workload_lengths(scenario: Scenario, requests: list[RequestSpec] | None = None) -> tuple[LengthSamples, float]:
    """Input lengths as a weighted sample, and the mean output length. A trace's sample is its
    requests up to duration_s: `requests` when the caller has read them already
    (build_requests(scenario)), so a run reads its trace once."""
    workload = scenario.workload
    if workload.trace is not None:
        requests = build_requests(scenario) if requests is None else requests
        if not requests:
            raise ScenarioError("workload.trace: no request arrives before duration_s; raise duration_s")
        inputs = np.array([r.input_len for r in requests], dtype=float)
        return LengthSamples.from_samples(inputs), float(np.mean([r.output_len for r in requests]))
    spec = workload.input_len
    if isinstance(spec, LognormalLength):
        samples = LengthSamples.truncated_lognormal(spec.mu, spec.sigma, spec.min, spec.max)
    elif isinstance(spec, FixedLength):
        samples = LengthSamples.from_samples(np.array([float(spec.tokens)]))
    elif isinstance(spec, UniformLength):
        samples = LengthSamples.from_samples(np.round(np.linspace(spec.min, spec.max, UNIFORM_SAMPLES)))
    else:
        assert isinstance(spec, EmpiricalLength)
        samples = LengthSamples.from_samples(np.array(length_distribution(spec).values, dtype=float))
    return samples, length_distribution(workload.output_len).mean()


def model_inputs(scenario: Scenario, requests: list[RequestSpec] | None = None) -> tuple[ModelInputs, ProfileTables]:
    """The throughput model's inputs; `requests` as workload_lengths takes them."""
    tables = profile_tables(scenario)
    remote, local = scenario.clusters.remote, scenario.clusters.local
    lengths, output_len = workload_lengths(scenario, requests)
    inputs = ModelInputs(
        kv_bytes=PiecewiseLinear(tables.lengths, tables.kv_bytes),
        prefill_remote_s=tables.prefill(remote.device, remote.speed_factor),
        prefill_local_s=tables.prefill(local.device, local.speed_factor),
        decode_step_s=tables.decode_step_s[local.device] / local.speed_factor,
        max_decode_batch=local.decode_max_batch,
        output_len=output_len,
        num_prfaas=remote.instances,
        num_local=local.instances,
        num_baseline=scenario.clusters.baseline_num_instances,
        egress_bytes_per_s=_egress_bytes_per_s(scenario),
        lengths=lengths,
    )
    return inputs, tables


def _egress_bytes_per_s(scenario: Scenario) -> float:
    rate = scenario.link.to_local.rate_bytes_per_s
    if not math.isfinite(rate):
        raise ScenarioError("link.bandwidth_mbit: the optimizer needs a finite link rate; set link.bandwidth_mbit")
    return rate
