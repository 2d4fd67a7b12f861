"""The scenario file's sections as frozen pydantic models: model, clusters, router, scheduler,
prefix cache, timeline events and `expect:` bounds. Field rules only: rules that span sections live
in scenario_rules.py and the workload in scenario_workload.py.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from emulator.control.types import NodeId, PrefixRule, RoutePolicy
from model_stub.config import PRESET_NAMES, SIZES


class Section(BaseModel):
    """Every scenario model: unknown keys, NaN and infinity are errors; values never change."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


# Strict numbers: YAML's `yes` or "8" is not a count; ints are accepted where floats are expected.
Count = Annotated[int, Field(strict=True, ge=0)]
PositiveCount = Annotated[int, Field(strict=True, ge=1)]
Positive = Annotated[float, Field(strict=True, gt=0)]
NonNegative = Annotated[float, Field(strict=True, ge=0)]
Fraction = Annotated[float, Field(strict=True, ge=0, le=1)]
Number = Annotated[float, Field(strict=True)]
Flag = Annotated[bool, Field(strict=True)]
Name = Annotated[str, Field(pattern=r"^[a-z0-9][a-z0-9-]*$", max_length=64)]

METRICS = (
    "completed_fraction", "failed_count", "ttft_mean_s", "ttft_p50_s", "ttft_p90_s", "ttft_p99_s",
    "tpot_mean_s", "throughput_rps", "egress_gbps_mean", "prfaas_fraction", "kv_bytes_total",
)
Metric = Literal[METRICS]  # type: ignore[valid-type]
ACTIONS = ("link", "set", "burst", "kill", "restart")
MAX_CONNECTIONS = 64


class ProfileSpec(Section):
    """A real model measured on real hardware: tables over input length, interpolated linearly."""

    name: Name
    lengths_tokens: tuple[PositiveCount, ...] = Field(min_length=2)
    kv_mib: tuple[Positive, ...]
    prefill_s: dict[Name, tuple[Positive, ...]]
    decode_step_ms: dict[Name, Positive] = {}


class ModelSpec(Section):
    """Exactly one of `preset` (a model_stub preset the live engine runs) or `profile`."""

    preset: Literal[PRESET_NAMES] | None = None  # type: ignore[valid-type]
    size: Literal[SIZES] | None = None  # type: ignore[valid-type]
    profile: ProfileSpec | None = None

    @property
    def preset_size(self) -> str:
        return self.size or "small"


class RemoteClusterSpec(Section):
    """The PrfaaS prefill cluster."""

    instances: Count
    device: Name
    speed_factor: Positive = 1.0


class LocalClusterSpec(Section):
    """The PD cluster; `prefill_instances=None` lets the optimizer choose N_p (the rest decode)."""

    instances: PositiveCount
    device: Name
    speed_factor: Positive = 1.0
    prefill_instances: Count | None = None
    decode_max_batch: PositiveCount = 20  # BS_max of the paper's case study


class ClustersSpec(Section):
    remote: RemoteClusterSpec
    local: LocalClusterSpec
    baseline_instances: PositiveCount | None = None

    @property
    def baseline_num_instances(self) -> int:
        """Size of the homogeneous-PD baseline: by default as many instances as both clusters."""
        if self.baseline_instances is not None:
            return self.baseline_instances
        return self.remote.instances + self.local.instances


class RouterSpec(Section):
    policy: RoutePolicy = RoutePolicy.PRFAAS
    threshold_tokens: Count | Literal["auto"] = "auto"
    prefix_rule: PrefixRule = PrefixRule.BANDWIDTH_SCARCE
    cache_affinity: Flag = True

    @field_validator("threshold_tokens", mode="before")
    @classmethod
    def _whole_tokens_or_auto(cls, value: Any) -> Any:
        """One clear error instead of one per union member (int, 'auto')."""
        if value == "auto" or (type(value) is int and value >= 0):
            return value
        raise ValueError("not a whole number of tokens >= 0 nor auto")


class ShortTermSpec(Section):
    """Re-search the threshold when egress or a queue nears its trigger (seconds scale)."""

    enabled: Flag = True
    interval_s: Positive = 5.0
    egress_util_trigger: Annotated[float, Field(strict=True, gt=0, le=1)] = 0.9
    queue_depth_trigger: PositiveCount = 16
    hysteresis: Annotated[float, Field(strict=True, ge=0, lt=1)] = 0.1


class LongTermSpec(Section):
    """Recompute the local prefill/decode split from observed traffic (minutes scale)."""

    enabled: Flag = True
    interval_s: Positive = 120.0


class SchedulerSpec(Section):
    short_term: ShortTermSpec = ShortTermSpec()
    long_term: LongTermSpec = LongTermSpec()


class CacheCapacitySpec(Section):
    remote: NonNegative = 65536.0
    local: NonNegative = 131072.0


class TransportSpec(Section):
    """How KV caches cross the link: TCP connections per prefill -> decode target and their
    congestion control. Live workers open them when they start; the virtual link caps a lossy
    transfer at the Mathis goodput of that many connections."""

    connections: Annotated[int, Field(strict=True, ge=1, le=MAX_CONNECTIONS)] = 4
    congestion: Literal["cubic", "reno", "bbr"] = "cubic"


class PrefixCacheSpec(Section):
    block_tokens: PositiveCount = 512  # the Mooncake trace's hash_ids cover 512-token blocks
    capacity_mib: CacheCapacitySpec = CacheCapacitySpec()


class BurstSpec(Section):
    requests: PositiveCount
    over_s: NonNegative = 0.0


class TimelineEvent(Section):
    """At `at_s`, exactly one action: change the link, set knobs, add a burst, kill or restart."""

    at_s: NonNegative
    link: dict[str, Any] | None = None  # partial LinkSpec fields, merged onto the link so far
    set: dict[str, Any] | None = None  # knob path (scenario_overrides.KNOBS) -> value
    burst: BurstSpec | None = None
    kill: str | None = None  # a NodeId, e.g. local-prefill-0
    restart: str | None = None

    @property
    def action(self) -> str:
        """The one action this event carries (the schema's checks guarantee there is one)."""
        return next(a for a in ACTIONS if getattr(self, a) is not None)

    @property
    def node_id(self) -> NodeId | None:
        text = self.kill if self.kill is not None else self.restart
        return None if text is None else NodeId.parse(text)


class Bounds(Section):
    min: Number | None = None
    max: Number | None = None


SECTION_HINTS = {
    "name": "use lowercase letters, digits and dashes, starting with a letter or digit",
    "engine": "use live or virtual",
    "seed": "use a whole number >= 0",
    "duration_s": "use a positive number of seconds",
    "model.preset": f"use one of {', '.join(PRESET_NAMES)}",
    "model.size": f"use one of {', '.join(SIZES)}",
    "lengths_tokens": "use at least 2 whole token counts, strictly increasing",
    "kv_mib": "use one positive size in MiB per length",
    "prefill_s": "give each device a list of positive seconds, one per length",
    "decode_step_ms": "give each decode device a positive step time in ms",
    "instances": "use a whole number of instances",
    "device": "name a device of model.profile (e.g. h200, h20), lowercase",
    "speed_factor": "use a positive multiplier, 1.0 for the profiled speed",
    "prefill_instances": "use a whole number below clusters.local.instances, or null (optimizer)",
    "decode_max_batch": "use a whole number of requests per decode instance, >= 1",
    "baseline_instances": "use a whole number >= 1, or drop it for remote + local instances",
    "policy": "use prfaas, local-only or all-remote",
    "threshold_tokens": "use a whole number of tokens >= 0, or auto",
    "prefix_rule": "use bandwidth-scarce or bandwidth-abundant",
    "enabled": "use true or false",
    "interval_s": "use a positive number of seconds",
    "egress_util_trigger": "use a utilisation in (0, 1]",
    "queue_depth_trigger": "use a whole number of queued requests, >= 1",
    "hysteresis": "use a fraction in [0, 1)",
    "block_tokens": "use a whole number of tokens per block, >= 1",
    "connections": f"use a whole number of TCP connections per KV link, 1 to {MAX_CONNECTIONS}",
    "congestion": "use cubic, reno or bbr",
    "capacity_mib.remote": "use a size in MiB >= 0",
    "capacity_mib.local": "use a size in MiB >= 0",
    "at_s": "use seconds >= 0 from the start of the run",
    "requests": "use a whole number of requests, >= 1",
    "over_s": "use seconds >= 0 (0 = all at once)",
}
