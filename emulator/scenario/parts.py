"""The scenario file's sections as frozen pydantic models: the model's profile, clusters, router,
scheduler, prefix cache, timeline events and `expect:` bounds (the `model:` section itself, which
may name a profile file, is model_section.py). Field rules only: rules that span sections live
in rules.py and the workload in workload.py.
"""

from __future__ import annotations

import reprlib
from collections.abc import Iterator
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, field_validator, model_validator
from pydantic_core import PydanticCustomError

from emulator.control.types import Affinity, NodeId, PrefixRule, RoutePolicy
from emulator.limits import (
    MAX_BUSY_WORKERS,
    MAX_CACHE_MIB,
    MAX_COMPUTE_FACTOR,
    MAX_DECODE_BATCH,
    MAX_DEVICES,
    MAX_DURATION_S,
    MAX_EXPECT,
    MAX_GPUS,
    MAX_HOST_CORES,
    MAX_INSTANCES,
    MAX_INTERVAL_S,
    MAX_KV_MIB,
    MAX_LOSS_RATE_FACTOR,
    MAX_PROFILE_POINTS,
    MAX_REQUESTS,
    MAX_SEED,
    MAX_SLOWDOWN,
    MAX_SPEED_FACTOR,
    MAX_STEP_S,
    MAX_TOKENS,
    MIN_COMPUTE_FACTOR,
    MIN_INTERVAL_S,
    MIN_LOSS_RATE_FACTOR,
    MIN_SPEED_FACTOR,
)
from emulator.validation import FIELD_ERROR, lines_error
from model_stub.config import PRESET_NAMES, SIZES


class Section(BaseModel):
    """Every scenario model: unknown keys, NaN and infinity are errors; values never change."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


# Strict numbers: YAML's `yes` or "8" is not a count; ints are accepted where floats are expected.
# Every number is bounded (emulator/limits.py), so a run inside the bounds finishes on this machine.
Count = Annotated[int, Field(strict=True, ge=0)]
PositiveCount = Annotated[int, Field(strict=True, ge=1)]
Positive = Annotated[float, Field(strict=True, gt=0)]
NonNegative = Annotated[float, Field(strict=True, ge=0)]
Fraction = Annotated[float, Field(strict=True, ge=0, le=1)]
Number = Annotated[float, Field(strict=True)]
Flag = Annotated[bool, Field(strict=True)]
AFFINITIES = " | ".join(a.value for a in Affinity)
Name = Annotated[str, Field(pattern=r"^[a-z0-9][a-z0-9-]*$", max_length=64)]
Seed = Annotated[int, Field(strict=True, ge=0, le=MAX_SEED)]
Duration = Annotated[float, Field(strict=True, gt=0, le=MAX_DURATION_S)]
Moment = Annotated[float, Field(strict=True, ge=0, le=MAX_DURATION_S)]  # seconds from the start
Tokens = Annotated[int, Field(strict=True, ge=1, le=MAX_TOKENS)]
Requests = Annotated[int, Field(strict=True, ge=1, le=MAX_REQUESTS)]
Instances = Annotated[int, Field(strict=True, ge=0, le=MAX_INSTANCES)]
Interval = Annotated[float, Field(strict=True, ge=MIN_INTERVAL_S, le=MAX_INTERVAL_S)]
Speed = Annotated[float, Field(strict=True, ge=MIN_SPEED_FACTOR, le=MAX_SPEED_FACTOR)]
Step = Annotated[float, Field(strict=True, gt=0, le=MAX_STEP_S)]
Expected = Annotated[float, Field(strict=True, ge=-MAX_EXPECT, le=MAX_EXPECT)]
CacheMib = Annotated[float, Field(strict=True, ge=0, le=MAX_CACHE_MIB)]

METRICS = (
    "completed_fraction", "failed_count", "ttft_mean_s", "ttft_p50_s", "ttft_p90_s", "ttft_p99_s",
    "tpot_mean_s", "throughput_rps", "egress_gbps_mean", "prfaas_fraction", "kv_bytes_total",
)
Metric = Literal[METRICS]  # type: ignore[valid-type]
ACTIONS = ("link", "set", "burst", "kill", "restart")
MAX_CONNECTIONS = 64


StepMs = Annotated[float, Field(strict=True, gt=0, le=MAX_STEP_S * 1000)]
BatchSize = Annotated[int, Field(strict=True, ge=1, le=MAX_DECODE_BATCH)]
Slowdown = Annotated[float, Field(strict=True, gt=0, le=MAX_SLOWDOWN)]


class HostSpec(Section):
    """The one machine every worker of a live run shares (`calibrate --machine` measures it): its
    cores, and `busy_slowdown[n - 1]`, the factor a worker's compute time is multiplied by while n
    workers are busy at once (1.0 for one: the tables were measured alone). `loss_rate_factor`:
    the share of the loss-limited rate (emulator/virtual/tcp.py's, fitted on a quiet host) a lossy
    link's connections keep while the live stack runs on this host (a lossy stack run measures it,
    emulator/virtual/stack_factors.py); 1: as on a quiet host. `compute_factor`: the host's compute
    time over the tables' (1.1: 10 % slower), which the virtual engine charges while the scheduler
    keeps the tables, as a live run's scheduler keeps its profile while the machine drifts (the
    live engine's host is the machine itself: it ignores both factors)."""

    cores: Annotated[int, Field(strict=True, ge=1, le=MAX_HOST_CORES)]
    busy_slowdown: tuple[Slowdown, ...] = Field(min_length=1, max_length=MAX_BUSY_WORKERS)
    loss_rate_factor: Annotated[float, Field(strict=True, ge=MIN_LOSS_RATE_FACTOR, le=MAX_LOSS_RATE_FACTOR)] = 1.0
    compute_factor: Annotated[float, Field(strict=True, ge=MIN_COMPUTE_FACTOR, le=MAX_COMPUTE_FACTOR)] = 1.0


class ProfileSpec(Section):
    """A real model measured on real hardware: tables over input length, interpolated linearly.

    `decode_step_ms` is T_decode (the step at BS_max, what the optimizer uses); the optional
    `decode_step_ms_by_batch` gives the step at each of `decode_batch_sizes`, which the virtual
    engine's decode nodes then use, and `host` makes every simulated worker share one machine.
    """

    name: Name
    lengths_tokens: tuple[Tokens, ...] = Field(min_length=2, max_length=MAX_PROFILE_POINTS)
    kv_mib: tuple[Annotated[float, Field(strict=True, gt=0, le=MAX_KV_MIB)], ...] = Field(
        max_length=MAX_PROFILE_POINTS)
    prefill_s: dict[Name, tuple[Step, ...]] = Field(max_length=MAX_DEVICES)
    decode_step_ms: dict[Name, StepMs] = Field(default={}, max_length=MAX_DEVICES)
    decode_batch_sizes: tuple[BatchSize, ...] = Field(default=(), max_length=MAX_PROFILE_POINTS)
    decode_step_ms_by_batch: dict[Name, tuple[StepMs, ...]] = Field(default={}, max_length=MAX_DEVICES)
    host: HostSpec | None = None
    # The MiB of a cache that only its last layer produces, one per entry of lengths_tokens: they
    # cross the link after the prefill ends (layer-wise pipelining), and their share grows with
    # length (kimi-linear-mini: 38 % at 1,100 tokens, 43 % at 2,000); empty: 1 / PIPELINE_LAYERS.
    kv_tail_mib: tuple[Annotated[float, Field(strict=True, gt=0, le=MAX_KV_MIB)], ...] = Field(
        default=(), max_length=MAX_PROFILE_POINTS)
    # The decode step's growth with context (attention reads every cached token): at each of
    # decode_context_tokens, the batch-1 step over the step at the context the batch table was
    # timed at; the virtual engine charges a batch the factor at its mean prompt length.
    decode_context_tokens: tuple[Tokens, ...] = Field(default=(), max_length=MAX_PROFILE_POINTS)
    decode_context_factor: tuple[Slowdown, ...] = Field(default=(), max_length=MAX_PROFILE_POINTS)


def _gpus_or_auto(value: Any) -> Any:
    """One clear error instead of one per union member (a list of GPU indices, 'auto')."""
    if value is None or value == "auto":
        return value
    if (isinstance(value, list | tuple) and len(value) <= MAX_GPUS
            and all(type(gpu) is int and 0 <= gpu < MAX_GPUS for gpu in value)):
        return value
    raise PydanticCustomError(FIELD_ERROR, "{text}", {"text": (
        f"{reprlib.repr(value)} is not a list of GPU indices 0..{MAX_GPUS - 1} nor auto; list one GPU "
        "per instance, e.g. [0, 1], or use auto")})


# The live engine's GPUs for a cluster, one worker per GPU (emulator/live/placement.py): a list of
# indices 0..MAX_GPUS - 1 as CUDA numbers this machine's GPUs, `auto` (the next free ones; CPU when
# none is visible) or None (the cluster's `device` picks cpu or auto, as before). The virtual engine
# ignores it: there `device` names the hardware profile.
GpuIndex = Annotated[int, Field(strict=True, ge=0, lt=MAX_GPUS)]
GpuList = Annotated[tuple[GpuIndex, ...], Field(max_length=MAX_GPUS)]
Devices = Annotated[GpuList | Literal["auto"] | None, BeforeValidator(_gpus_or_auto)]


class RemoteClusterSpec(Section):
    """The PrfaaS prefill cluster."""

    instances: Instances
    device: Name
    speed_factor: Speed = 1.0
    devices: Devices = None


class LocalClusterSpec(Section):
    """The PD cluster; `prefill_instances=None` lets the optimizer choose N_p (the rest decode)."""

    instances: Annotated[int, Field(strict=True, ge=1, le=MAX_INSTANCES)]
    device: Name
    speed_factor: Speed = 1.0
    prefill_instances: Instances | None = None
    # BS_max of the paper's case study
    decode_max_batch: Annotated[int, Field(strict=True, ge=1, le=MAX_DECODE_BATCH)] = 20
    devices: Devices = None


class ClustersSpec(Section):
    remote: RemoteClusterSpec
    local: LocalClusterSpec
    baseline_instances: Annotated[int, Field(strict=True, ge=1, le=2 * MAX_INSTANCES)] | None = None

    @model_validator(mode="after")
    def _one_gpu_per_worker(self) -> ClustersSpec:
        """What `validate` can check of `devices` without a GPU; the run checks them against the
        GPUs it sees (emulator/live/placement.py)."""
        problems = list(self._device_problems())
        if problems:
            raise lines_error(problems)
        return self

    def _device_problems(self) -> Iterator[str]:
        listed: dict[str, tuple[int, ...]] = {}
        for name, cluster in (("remote", self.remote), ("local", self.local)):
            devices, where = cluster.devices, f"clusters.{name}.devices"
            if devices is None:
                continue
            if cluster.device == "cpu":
                yield (f"{where}: given with clusters.{name}.device cpu; drop devices to run on CPU, or name "
                       "the GPU in device (e.g. h200)")
            if devices == "auto":
                continue
            listed[name] = devices
            if len(devices) != cluster.instances:
                yield (f"{where}: {len(devices)} GPUs for {cluster.instances} instances; list one GPU per "
                       "instance, or use auto")
            if repeated := sorted({gpu for gpu in devices if devices.count(gpu) > 1}):
                yield f"{where}: GPU {_gpus(repeated)} listed more than once; give each worker its own GPU"
        if shared := sorted(set(listed.get("remote", ())) & set(listed.get("local", ()))):
            yield (f"clusters.local.devices: GPU {_gpus(shared)} also in clusters.remote.devices; give each "
                   "worker its own GPU")

    @property
    def baseline_num_instances(self) -> int:
        """Size of the homogeneous-PD baseline: by default as many instances as both clusters."""
        if self.baseline_instances is not None:
            return self.baseline_instances
        return self.remote.instances + self.local.instances


def _gpus(gpus: list[int]) -> str:
    return ", ".join(map(str, gpus))


class RouterSpec(Section):
    """`affinity` picks the prefill node inside the chosen cluster (emulator.control.router)."""

    policy: RoutePolicy = RoutePolicy.PRFAAS
    threshold_tokens: Annotated[int, Field(strict=True, ge=0, le=MAX_TOKENS)] | Literal["auto"] = "auto"
    prefix_rule: PrefixRule = PrefixRule.BANDWIDTH_SCARCE
    affinity: Affinity = Affinity.COST

    @model_validator(mode="before")
    @classmethod
    def _renamed(cls, data: Any) -> Any:
        """The boolean `cache_affinity` became `affinity`: say so rather than "unknown field"."""
        if isinstance(data, dict) and "cache_affinity" in data:
            raise lines_error([f"router.cache_affinity: renamed; use router.affinity: {AFFINITIES}"])
        return data

    @field_validator("threshold_tokens", mode="before")
    @classmethod
    def _whole_tokens_or_auto(cls, value: Any) -> Any:
        """One clear error instead of one per union member (int, 'auto')."""
        if value == "auto" or (type(value) is int and 0 <= value <= MAX_TOKENS):
            return value
        raise ValueError(f"not a whole number of tokens in 0..{MAX_TOKENS} nor auto")


class ShortTermSpec(Section):
    """Re-search the threshold when egress or a queue nears its trigger (seconds scale)."""

    enabled: Flag = True
    interval_s: Interval = 5.0
    egress_util_trigger: Annotated[float, Field(strict=True, gt=0, le=1)] = 0.9
    queue_depth_trigger: Requests = 16
    hysteresis: Annotated[float, Field(strict=True, ge=0, lt=1)] = 0.1


class LongTermSpec(Section):
    """Recompute the local prefill/decode split from observed traffic (minutes scale)."""

    enabled: Flag = True
    interval_s: Interval = 120.0


class SchedulerSpec(Section):
    short_term: ShortTermSpec = ShortTermSpec()
    long_term: LongTermSpec = LongTermSpec()


class CacheCapacitySpec(Section):
    remote: CacheMib = 65536.0
    local: CacheMib = 131072.0


class TransportSpec(Section):
    """How KV caches cross the link: TCP connections per prefill -> decode target and their
    congestion control. Live workers open them when they start; the virtual link caps a lossy
    transfer at the Mathis goodput of that many connections."""

    connections: Annotated[int, Field(strict=True, ge=1, le=MAX_CONNECTIONS)] = 4
    congestion: Literal["cubic", "reno", "bbr"] = "cubic"


RAY_RESOURCE_PATTERN = r"^[A-Za-z0-9_]{1,64}$"
RayResource = Annotated[str, Field(pattern=RAY_RESOURCE_PATTERN)]


class RaySpec(Section):
    """Live workers placed on the nodes of a Ray cluster (issue 30): each remote worker takes one
    unit of `remote_resource`, each local worker one of `local_resource` (custom resources given to
    `ray start --resources`). `address` is the head's HOST:PORT, `auto` (the cluster started on this
    machine) or `local` (a private Ray started for this run, offering both resources)."""

    address: Annotated[str, Field(min_length=1, max_length=300)] = "auto"
    remote_resource: RayResource = "prfaas_remote"
    local_resource: RayResource = "prfaas_local"

    @field_validator("address")
    @classmethod
    def _host_port(cls, value: str) -> str:
        host, sep, port = value.strip().rpartition(":")
        if value.strip() in ("auto", "local") or (sep and host and port.isdigit() and 1 <= int(port) <= 65535):
            return value.strip()
        raise ValueError(f"{value!r} is not HOST:PORT, auto or local")


class PrefixCacheSpec(Section):
    block_tokens: Tokens = 512  # the Mooncake trace's hash_ids cover 512-token blocks
    capacity_mib: CacheCapacitySpec = CacheCapacitySpec()


class BurstSpec(Section):
    requests: Requests
    over_s: Moment = 0.0


class TimelineEvent(Section):
    """At `at_s`, exactly one action: change the link, set knobs, add a burst, kill or restart."""

    at_s: Moment
    link: dict[str, Any] | None = None  # partial LinkSpec fields, merged onto the link so far
    set: dict[str, Any] | None = None  # knob path (overrides.KNOBS) -> value
    burst: BurstSpec | None = None
    kill: Annotated[str, Field(max_length=64)] | None = None  # a NodeId, e.g. local-prefill-0
    restart: Annotated[str, Field(max_length=64)] | None = None

    @property
    def action(self) -> str:
        """The one action this event carries (the schema's checks guarantee there is one)."""
        return next(a for a in ACTIONS if getattr(self, a) is not None)

    @property
    def node_id(self) -> NodeId | None:
        text = self.kill if self.kill is not None else self.restart
        return None if text is None else NodeId.parse(text)


class Bounds(Section):
    min: Expected | None = None
    max: Expected | None = None


SECTION_HINTS = {
    "name": "use lowercase letters, digits and dashes, starting with a letter or digit",
    "description": "use at most 4,096 characters",
    "engine": "use live or virtual",
    "seed": f"use a whole number from 0 to {MAX_SEED:,}",
    "duration_s": f"use a positive number of seconds, at most {MAX_DURATION_S:,.0f} (30 days)",
    "model.preset": f"use one of {', '.join(PRESET_NAMES)}",
    "model.size": f"use one of {', '.join(SIZES)}",
    "lengths_tokens": (f"use 2 to {MAX_PROFILE_POINTS} whole token counts, strictly increasing, "
                       f"each at most {MAX_TOKENS:,}"),
    "kv_mib": f"use one positive size in MiB per length, at most {MAX_KV_MIB:,.0f}",
    "prefill_s": (f"give at most {MAX_DEVICES} devices a list of positive seconds, one per length, "
                  f"each at most {MAX_STEP_S:,.0f}"),
    "decode_step_ms": (f"give each decode device a positive step time in ms, "
                       f"at most {MAX_STEP_S * 1000:,.0f}"),
    "decode_batch_sizes": (f"use 2 to {MAX_PROFILE_POINTS} whole batch sizes, strictly increasing, "
                           f"each 1 to {MAX_DECODE_BATCH:,}"),
    "decode_step_ms_by_batch": (f"give each decode device a list of positive step times in ms, one per "
                                f"batch size, each at most {MAX_STEP_S * 1000:,.0f}"),
    "cores": f"use a whole number of cores, 1 to {MAX_HOST_CORES:,}",
    "busy_slowdown": (f"give 1 to {MAX_BUSY_WORKERS:,} factors, 1.0 first (one busy worker), each "
                      f"above 0 and at most {MAX_SLOWDOWN:,.0f}"),
    "loss_rate_factor": (f"give the share of the loss-limited rate kept, {MIN_LOSS_RATE_FACTOR:g} to "
                         f"{MAX_LOSS_RATE_FACTOR:g} (1: a quiet host)"),
    "compute_factor": (f"give the host's compute time over the profile's, {MIN_COMPUTE_FACTOR:g} to "
                       f"{MAX_COMPUTE_FACTOR:g} (1: as profiled)"),
    "kv_tail_mib": "give the last layer's MiB per length, positive and at most that length's kv_mib",
    "profile_file": "name a profile YAML file (`python -m emulator calibrate SCENARIO --machine` writes one)",
    "instances": f"use a whole number of instances, at most {MAX_INSTANCES:,}",
    "device": "name a device of model.profile (e.g. h200, h20), lowercase",
    "speed_factor": (f"use a multiplier from {MIN_SPEED_FACTOR:g} to {MAX_SPEED_FACTOR:,.0f}, "
                     "1.0 for the profiled speed"),
    "prefill_instances": "use a whole number below clusters.local.instances, or null (optimizer)",
    "decode_max_batch": f"use a whole number of requests per decode instance, 1 to {MAX_DECODE_BATCH:,}",
    "baseline_instances": (f"use a whole number from 1 to {2 * MAX_INSTANCES:,}, or drop it for "
                           "remote + local instances"),
    "policy": "use prfaas, local-only or all-remote",
    "threshold_tokens": f"use a whole number of tokens >= 0, at most {MAX_TOKENS:,}, or auto",
    "prefix_rule": "use bandwidth-scarce or bandwidth-abundant",
    "affinity": ("use cost (least estimated TTFT), longest-prefix (the longest cached prefix) or off "
                 "(least loaded)"),
    "enabled": "use true or false",
    "interval_s": f"use seconds from {MIN_INTERVAL_S:g} to {MAX_INTERVAL_S:,.0f} (at most a day)",
    "egress_util_trigger": "use a utilisation in (0, 1]",
    "queue_depth_trigger": f"use a whole number of queued requests, 1 to {MAX_REQUESTS:,}",
    "hysteresis": "use a fraction in [0, 1)",
    "block_tokens": f"use a whole number of tokens per block, 1 to {MAX_TOKENS:,}",
    "connections": f"use a whole number of TCP connections per KV link, 1 to {MAX_CONNECTIONS}",
    "congestion": "use cubic, reno or bbr",
    "capacity_mib.remote": f"use a size in MiB >= 0, at most {MAX_CACHE_MIB:,.0f}",
    "capacity_mib.local": f"use a size in MiB >= 0, at most {MAX_CACHE_MIB:,.0f}",
    "ray.address": "use the Ray head's HOST:PORT (e.g. 10.0.0.5:6379), auto or local",
    "ray.remote_resource": "use 1 to 64 letters, digits or underscores (a Ray custom resource name)",
    "ray.local_resource": "use 1 to 64 letters, digits or underscores (a Ray custom resource name)",
    "at_s": f"use seconds >= 0 from the start of the run, at most {MAX_DURATION_S:,.0f}",
    "requests": f"use a whole number of requests, 1 to {MAX_REQUESTS:,}",
    "over_s": f"use seconds >= 0 (0 = all at once), at most {MAX_DURATION_S:,.0f}",
    "kill": "name a node, e.g. local-prefill-0",
    "restart": "name a node, e.g. local-prefill-0",
    "min": f"use a number from {-MAX_EXPECT:g} to {MAX_EXPECT:g} (at most {MAX_EXPECT:g})",
    "max": f"use a number from {-MAX_EXPECT:g} to {MAX_EXPECT:g} (at most {MAX_EXPECT:g})",
}
