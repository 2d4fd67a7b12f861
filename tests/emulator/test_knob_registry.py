"""Every knob of the registry (emulator.knobs), from each of its sources, on both engines.

Sources: the timeline's `set:`, an MQTT control message and `--set`. The virtual engine takes no
control messages (a simulated run is over in seconds, there is no one to send them): its control
case applies the registry directly to a virtual run's ControlState, and a pause reaching its
mechanics is refused with a reason. The live run (marked root) turns every knob in one short run,
and its words and resulting state must equal the virtual engine's.
"""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Any, get_args

import pandas as pd
import pytest

from emulator import knobs as registry
from emulator.errors import PrfaasError
from emulator.plane import make_control_plane
from emulator.scenario import Scenario, apply_overrides, parse_scenario
from emulator.scenario.overrides import KNOBS
from emulator.telemetry.control_messages import Knob, parse_control
from emulator.virtual.engine import simulate

BASE: dict[str, Any] = {
    "name": "knobs", "engine": "virtual", "seed": 7, "duration_s": 6.0,
    "model": {"preset": "kimi-linear-mini", "size": "tiny"},
    "clusters": {"remote": {"instances": 1, "device": "cpu"},
                 "local": {"instances": 2, "device": "cpu", "prefill_instances": 1, "decode_max_batch": 4}},
    "link": {"bandwidth_mbit": 200, "delay_ms": 5},
    "router": {"policy": "prfaas", "threshold_tokens": 1024},
    # both loops on, but never due within the run: the knobs alone move the state
    "scheduler": {"short_term": {"enabled": True, "interval_s": 3600},
                  "long_term": {"enabled": True, "interval_s": 7200}},
    "prefix_cache": {"block_tokens": 64, "capacity_mib": {"remote": 64, "local": 64}},
    "workload": {"arrival": {"kind": "poisson", "rate_per_s": 2.0},
                 "input_len": {"kind": "uniform", "min": 200, "max": 3000},
                 "output_len": {"kind": "fixed", "tokens": 4}, "max_requests": 8},
}
# One legal value per knob path, different from BASE, and the words it reports ({auto}: the
# optimizer's threshold for this scenario).
SETTINGS: dict[str, tuple[Any, str]] = {
    "router.threshold_tokens": ("auto", "threshold -> {auto} tokens"),
    "router.policy": ("local-only", "router policy -> local-only"),
    "router.affinity": ("longest-prefix", "affinity -> longest-prefix"),
    "scheduler.short_term.enabled": (False, "scheduler short-term off, long-term on"),
    "scheduler.long_term.enabled": (False, "scheduler short-term on, long-term off"),
    "clusters.local.prefill_instances": (1, "local prefill instances 1 -> 1 (0 flips, drained first)"),
    "workload.arrival.rate_per_s": (3.0, "arrival rate -> 3/s"),
    "link.bandwidth_mbit": (150, "link -> 150 Mbit/s, 5 ms, 0 % loss"),
    "link.delay_ms": (10, "link -> 200 Mbit/s, 10 ms, 0 % loss"),
    "link.loss_pct": (0.5, "link -> 200 Mbit/s, 5 ms, 0.5 % loss"),
    "link.jitter_ms": (1, "link -> 200 Mbit/s, 5 ms, 0 % loss"),
}
# Every control message, in the order the live operator sends them.
CONTROLS: list[tuple[Knob, dict[str, Any]]] = [
    (Knob.THRESHOLD, {"tokens": 4096}), (Knob.THRESHOLD, {"tokens": "auto"}),
    (Knob.POLICY, {"policy": "prfaas"}), (Knob.AFFINITY, {"mode": "off"}),
    (Knob.SCHEDULER, {"short_term": True}), (Knob.LINK, {"delay_ms": 5}),
    (Knob.ARRIVAL_RATE, {"rate_per_s": 2.0}), (Knob.PAUSE, {}), (Knob.RESUME, {}),
]


def scenario(engine: str = "virtual", **changes: Any) -> Scenario:
    return parse_scenario(BASE | {"engine": engine} | changes, Path.cwd())


def words(path: str, auto: int) -> str:
    return SETTINGS[path][1].format(auto=auto)


def control_words(plane: Any, link: Any) -> list[str]:
    """The registry applied directly, as a virtual run would apply the CONTROLS."""
    said = []
    for knob, payload in CONTROLS:
        command = parse_control(knob.value, json.dumps({"v": 1, **payload}).encode(), link)
        effect = registry.apply_command(plane.state, command, link=link, has_scheduler=plane.scheduler is not None)
        if isinstance(effect.action, registry.SetLink):
            link = effect.action.spec
        said.append(effect.words)
    return said


def test_every_knob_has_a_source_and_the_bounds_the_schemas_promise() -> None:
    paths = {k.path for k in registry.REGISTRY if k.path is not None}
    assert paths == set(SETTINGS) == set(KNOBS)
    assert {k.control for k in registry.REGISTRY if k.control is not None} == set(Knob)
    assert {knob for knob, _ in CONTROLS} == set(Knob)
    from emulator.telemetry import control_messages as messages
    for spec in registry.REGISTRY:  # each bound the control schema enforces is the registry's
        model = {Knob.THRESHOLD: messages.ThresholdControl, Knob.ARRIVAL_RATE: messages.ArrivalRateControl,
                 Knob.LINK: messages.LinkControl}.get(spec.control)  # type: ignore[arg-type]
        if model is not None and spec.field is not None:
            limits = {type(m).__name__: m for m in model.model_fields[spec.field].metadata}
            high = limits["Le"].le
            assert high == spec.high, spec.path
    assert get_args(messages.PolicyControl.model_fields["policy"].annotation) == registry.POLICIES
    assert get_args(messages.AffinityControl.model_fields["mode"].annotation) == registry.AFFINITIES


@pytest.mark.parametrize("path", list(SETTINGS))
def test_virtual_timeline_turns_each_knob(path: str) -> None:
    value, _ = SETTINGS[path]
    result = simulate(scenario(timeline=[{"at_s": 1.0, "set": {path: value}}]))
    state, auto = result.plane.state, result.plane.state.auto_threshold
    assert result.loops.knob_changes == [f"t=1.0s timeline: {words(path, auto)}"]
    expected = make_control_plane(scenario()).state
    registry.apply_setting(expected, path, value, link=scenario().link, has_scheduler=True)
    assert (state.router, state.short_term_enabled, state.long_term_enabled, state.split_target) == (
        expected.router, expected.short_term_enabled, expected.long_term_enabled, expected.split_target)
    if path.startswith("link."):
        assert getattr(result.loops.steering.link, path.removeprefix("link.")) == value


@pytest.mark.parametrize("path", list(SETTINGS))
def test_set_flag_turns_each_knob_at_the_start(path: str) -> None:
    value, _ = SETTINGS[path]
    text = value if isinstance(value, str) else json.dumps(value)
    sc = apply_overrides(scenario(), [f"{path}={text}"])
    plane = make_control_plane(sc)  # both engines start from this plane
    if path == "router.threshold_tokens":
        assert plane.state.threshold_tokens == plane.state.auto_threshold == plane.threshold
        return
    node: Any = sc
    for part in path.split("."):
        node = getattr(node, part)
    assert (node.value if hasattr(node, "value") else node) == value


def test_virtual_control_messages_go_through_the_registry_and_a_pause_is_refused() -> None:
    result = simulate(scenario())
    plane = result.plane
    assert control_words(plane, result.loops.steering.link) == [
        "threshold -> 4096 tokens", f"threshold -> {plane.state.auto_threshold} tokens",
        "router policy -> prfaas", "affinity -> off", "scheduler short-term on, long-term on",
        "link -> 200 Mbit/s, 5 ms, 0 % loss", "arrival rate -> 2/s", "arrivals paused", "arrivals resumed"]
    note = result.loops.steering.command(parse_control("pause", b'{"v": 1}'))[-1]
    assert note.refused and "virtual run has no wall clock" in note.words


def test_a_refused_timeline_knob_is_noted_and_the_run_goes_on() -> None:
    result = simulate(scenario(timeline=[{"at_s": 1.0, "set": {"clusters.local.prefill_instances": 1}}]))
    assert not any("refused" in line for line in result.loops.knob_changes)
    plane = make_control_plane(scenario())
    with pytest.raises(PrfaasError, match="router.threshold_tokens"):
        registry.apply_setting(plane.state, "router.threshold_tokens", "Auto", link=scenario().link,
                               has_scheduler=True)


def test_a_scheduler_loop_turned_on_without_a_scheduler_is_refused_with_its_reason() -> None:
    """Issue 26: the Live page showed it as taken; the run must refuse it, so the page can say so."""
    plane = make_control_plane(scenario())
    on = parse_control("scheduler", json.dumps({"v": 1, "short_term": True}).encode())
    with pytest.raises(PrfaasError, match="control/scheduler: this scenario runs no scheduler"):
        registry.apply_command(plane.state, on, link=scenario().link, has_scheduler=False)
    with pytest.raises(PrfaasError, match="timeline.set.scheduler.long_term.enabled: this scenario runs no"):
        registry.apply_setting(plane.state, "scheduler.long_term.enabled", True, link=scenario().link,
                               has_scheduler=False)
    off = parse_control("scheduler", json.dumps({"v": 1, "short_term": False}).encode())
    effect = registry.apply_command(plane.state, off, link=scenario().link, has_scheduler=False)
    assert effect.words == "scheduler: not running in this scenario (both loops stay off)"


# --- the live engine: one run turns every knob from the timeline and over MQTT ------------------


async def _operate(url: str, run_id: str, statuses: list[dict]) -> None:
    """Once the timeline has fired (t = 2 s), send every control message in order."""
    import aiomqtt

    from emulator.telemetry.broker import parse_broker_url
    address = parse_broker_url(url)
    async with aiomqtt.Client(address.host, address.port) as client:
        await client.subscribe(f"prfaas/{run_id}/status")
        async for message in client.messages:
            statuses.append(json.loads(message.payload))
            if sum("timeline" in (s.get("note") or "") for s in statuses) or len(statuses) > 1:
                break
        await asyncio.sleep(2.5)
        for knob, payload in CONTROLS:
            await client.publish(f"prfaas/{run_id}/control/{knob.value}", json.dumps({"v": 1, **payload}))


@pytest.mark.root
@pytest.mark.skipif(os.geteuid() != 0, reason="needs root: namespaces and TUN need CAP_NET_ADMIN")
def test_live_turns_every_knob_as_the_virtual_engine(tmp_path: Path, embedded_broker: Any) -> None:
    from emulator.live.session import run_live
    from emulator.net.names import new_run_id

    first = {p: v for p, (v, _) in SETTINGS.items() if p != "router.threshold_tokens"}
    timeline = [{"at_s": 1.0, "set": {"router.threshold_tokens": 1024, **first}},
                {"at_s": 1.5, "set": {"router.threshold_tokens": "auto"}}]
    virtual = apply_overrides(scenario(timeline=timeline), ["router.threshold_tokens=auto"])
    live = apply_overrides(scenario("live", timeline=timeline), ["router.threshold_tokens=auto"])
    sim = simulate(virtual)
    run_id, statuses = new_run_id(), []

    async def both() -> dict:
        operator = asyncio.create_task(_operate(embedded_broker.url, run_id, statuses))
        try:
            return await run_live(live, tmp_path / "run", broker_url=embedded_broker.url, run_id=run_id)
        finally:
            operator.cancel()

    doc = asyncio.run(both())
    changes = doc["meta"]["knob_changes"]
    said = {kind: [line.split(f"{kind}: ", 1)[1] for line in changes if f"s {kind}: " in line]
            for kind in ("timeline", "control")}
    assert said["timeline"] == [line.split("timeline: ", 1)[1] for line in sim.loops.knob_changes]
    assert said["control"] == control_words(sim.plane, sim.loops.steering.link)
    series = pd.read_parquet(tmp_path / "run" / "timeseries.parquet")
    auto = sim.plane.state.auto_threshold
    assert series["threshold_tokens"].iloc[0] == auto == doc["meta"]["threshold_start"]  # --set auto
    assert series["threshold_tokens"].iloc[-1] == auto  # the last control message: auto again
    records = pd.read_parquet(tmp_path / "run" / "requests.parquet")
    assert (records["status"] == "completed").all()
