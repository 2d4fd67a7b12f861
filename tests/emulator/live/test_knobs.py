"""The live knob layer takes only typed, bounded values: a timeline `set:` value or a command that is
not what the schema promises is refused in one line and changes nothing."""

from __future__ import annotations

import asyncio

import pytest

from emulator.control.prefix_cache import PrefixCacheIndex
from emulator.control.router import Router, RouterConfig
from emulator.control.types import Affinity, Cluster, PrefixRule, RoutePolicy
from emulator.errors import PrfaasError
from emulator.limits import MAX_INSTANCES, MAX_RATE_PER_S, MAX_TOKENS
from emulator.live.knobs import Knobs
from emulator.live.pacing import WorkloadClock
from emulator.net.spec import LinkSpec
from emulator.telemetry.control_messages import ControlCommand, Knob, parse_control

HUGE = 10**400


class Harness:
    """Real router and workload clock; the link and the split are recorded where they land."""

    def __init__(self) -> None:
        index = PrefixCacheIndex(1000, 100, 10, {Cluster.REMOTE: 10**9, Cluster.LOCAL: 10**9})
        self.router = Router(RouterConfig(RoutePolicy.PRFAAS, 4096, PrefixRule.BANDWIDTH_SCARCE,
                                          Affinity.COST), index, prefill_s=lambda cluster, tokens: tokens / 10_000)
        self.clock = WorkloadClock(10.0)
        self.links: list[LinkSpec] = [LinkSpec(bandwidth_mbit=1000)]
        self.splits: list[int] = []
        self.knobs = Knobs(self.router, None, self.clock, lambda: self.links[-1],
                           self._update_link, self._split)

    async def _update_link(self, spec: LinkSpec) -> None:
        self.links.append(spec)

    async def _split(self, num_prefill: int) -> str:
        self.splits.append(num_prefill)
        return f"split -> {num_prefill}"

    def state(self) -> tuple[object, ...]:
        return self.router.config, self.clock.speed, tuple(self.links), tuple(self.splits)


def setting(harness: Harness, path: str, value: object) -> str:
    return asyncio.run(harness.knobs.apply_setting(path, value))


@pytest.mark.parametrize(
    ("path", "value"),
    [
        ("router.threshold_tokens", HUGE),
        ("router.threshold_tokens", MAX_TOKENS + 1),
        ("router.threshold_tokens", "8000"),
        ("router.threshold_tokens", 8000.5),
        ("router.threshold_tokens", True),
        ("router.threshold_tokens", -1),
        ("router.threshold_tokens", "Auto"),
        ("router.threshold_tokens", [[[1]]]),
        ("router.policy", "fastest"),
        ("router.affinity", "yes"),
        ("router.affinity", True),
        ("scheduler.short_term.enabled", 1),
        ("workload.arrival.rate_per_s", HUGE),
        ("workload.arrival.rate_per_s", MAX_RATE_PER_S * 2),
        ("workload.arrival.rate_per_s", "10"),
        ("workload.arrival.rate_per_s", float("nan")),
        ("workload.arrival.rate_per_s", 0),
        ("clusters.local.prefill_instances", None),
        ("clusters.local.prefill_instances", "2"),
        ("clusters.local.prefill_instances", HUGE),
        ("clusters.local.prefill_instances", MAX_INSTANCES + 1),
        ("link.delay_ms", HUGE),
        ("link.bandwidth_mbit", "fast"),
        ("link.bandwidth_mbit", 1e-310),  # issue 25: was taken, and the next snapshot was inf
        ("link.bandwidth_mbit", 0),  # a cut is loss_pct 100
        ("link.delay_ms", 5e-324),
        ("workload.arrival.rate_per_s", 1e-310),
    ],
    ids=lambda v: v if isinstance(v, str) else repr(v)[:16],
)
def test_a_setting_outside_the_schema_is_refused_and_changes_nothing(path: str,
                                                                     value: object) -> None:
    harness = Harness()
    before = harness.state()
    with pytest.raises(PrfaasError) as err:
        setting(harness, path, value)
    message = str(err.value)
    assert path.rsplit(".", 1)[-1] in message and "\n" not in message and len(message) < 400
    assert harness.state() == before


def test_settings_inside_the_bounds_apply() -> None:
    harness = Harness()
    assert setting(harness, "router.threshold_tokens", MAX_TOKENS) == f"threshold -> {MAX_TOKENS} tokens"
    assert harness.router.config.threshold_tokens == MAX_TOKENS
    assert setting(harness, "router.threshold_tokens", "auto") == "threshold -> 4096 tokens"
    setting(harness, "router.policy", "local-only")
    setting(harness, "router.affinity", "off")
    assert (harness.router.config.policy, harness.router.config.affinity) == (
        RoutePolicy.LOCAL_ONLY, Affinity.OFF)
    setting(harness, "workload.arrival.rate_per_s", 20)
    assert harness.clock.speed == 2.0
    setting(harness, "clusters.local.prefill_instances", 3)
    setting(harness, "link.delay_ms", 25)
    assert harness.splits == [3] and harness.links[-1].delay_ms == 25


@pytest.mark.parametrize(
    "command",
    [
        ControlCommand(Knob.THRESHOLD, "8000"),
        ControlCommand(Knob.THRESHOLD, HUGE),
        ControlCommand(Knob.THRESHOLD, True),
        ControlCommand(Knob.ARRIVAL_RATE, "10"),
        ControlCommand(Knob.ARRIVAL_RATE, float("inf")),
        ControlCommand(Knob.POLICY, 3),
        ControlCommand(Knob.AFFINITY, "no"),
        ControlCommand(Knob.AFFINITY, False),
        ControlCommand(Knob.SCHEDULER, True),
        ControlCommand(Knob.LINK, {"delay_ms": 5}),
    ],
    ids=lambda c: f"{c.knob.value}-{type(c.value).__name__}",
)
def test_a_command_not_built_by_the_schema_is_refused(command: ControlCommand) -> None:
    harness = Harness()
    before = harness.state()
    with pytest.raises(PrfaasError, match=f"control/{command.knob.value}"):
        asyncio.run(harness.knobs.apply_command(command))
    assert harness.state() == before


def test_parsed_commands_apply() -> None:
    harness = Harness()
    for knob, payload in (("threshold", b'{"v": 1, "tokens": 8000}'),
                          ("arrival_rate", b'{"v": 1, "rate_per_s": 5}'),
                          ("link", b'{"v": 1, "delay_ms": 40}'), ("pause", b'{"v": 1}')):
        asyncio.run(harness.knobs.apply_command(parse_control(knob, payload, harness.links[-1])))
    assert harness.router.config.threshold_tokens == 8000
    assert harness.clock.is_paused and harness.links[-1].delay_ms == 40


def test_the_knob_state_each_snapshot_reports_follows_every_knob_turned() -> None:
    """Issue 26: the Live page's widgets follow this, whoever turned the knob; a scheduler loop in a run
    without a scheduler is refused and reported off."""
    harness = Harness()
    knobs = harness.knobs
    before = knobs.reported()
    assert (before.policy, before.affinity, before.has_scheduler, before.short_term, before.rate_per_s,
            before.is_paused) == ("prfaas", "cost", False, False, 10.0, False)
    for knob, payload in ((Knob.POLICY, b'{"v": 1, "policy": "local-only"}'),
                          (Knob.AFFINITY, b'{"v": 1, "mode": "off"}'),
                          (Knob.ARRIVAL_RATE, b'{"v": 1, "rate_per_s": 2.5}'), (Knob.PAUSE, b'{"v": 1}')):
        asyncio.run(knobs.apply_command(parse_control(knob.value, payload)))
    with pytest.raises(PrfaasError, match="runs no scheduler"):
        asyncio.run(knobs.apply_command(parse_control("scheduler", b'{"v": 1, "short_term": true}')))
    after = knobs.reported()
    assert (after.policy, after.affinity, after.short_term, after.rate_per_s, after.is_paused) == (
        "local-only", "off", False, 2.5, True)
