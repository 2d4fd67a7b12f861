"""Physical bounds of every knob (issue 25): a value across the whole float range (subnormals, +-0,
inf, nan, 1e-310, 1e308, the bounds and just past them) is either refused alike at every boundary
(scenario file, `--set`, timeline `set:` and `link:`, control message, the registry's own lever) in
one line naming the field and its bounds, or taken by all of them and gives a short virtual run that
ends, with finite metrics and its record (summary.json).

The registry's KnobSpec (low, high, min_nonzero) is the oracle: each source must enforce exactly it.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import math
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings, strategies as st

from emulator import knobs as registry
from emulator.errors import PrfaasError
from emulator.knobs import KnobSpec, ValueKind
from emulator.plane import make_control_plane
from emulator.scenario import Scenario, apply_overrides, parse_scenario
from emulator.telemetry.control_messages import parse_control
from emulator.telemetry.recorder import load_run
from emulator.virtual.engine import Simulation, record_run, simulate

# Two seconds of arrivals, three requests at most: a run is over in milliseconds when it ends.
TINY: dict[str, Any] = {
    "name": "tiny", "engine": "virtual", "seed": 3, "duration_s": 2.0,
    "model": {"preset": "kimi-linear-mini", "size": "tiny"},
    "clusters": {"remote": {"instances": 1, "device": "cpu"},
                 "local": {"instances": 2, "device": "cpu", "prefill_instances": 1, "decode_max_batch": 4}},
    "link": {"bandwidth_mbit": 200, "delay_ms": 5},
    "router": {"policy": "prfaas", "threshold_tokens": 256},
    "scheduler": {"short_term": {"enabled": True, "interval_s": 1.0},
                  "long_term": {"enabled": False}},
    "workload": {"arrival": {"kind": "poisson", "rate_per_s": 2.0},
                 "input_len": {"kind": "uniform", "min": 200, "max": 3000},
                 "output_len": {"kind": "fixed", "tokens": 4}, "max_requests": 3},
}
KNOBS = [spec for spec in registry.REGISTRY if spec.path is not None]
NUMERIC = (ValueKind.RATE, ValueKind.LINK)
TINIEST = 5e-324


def admitted(spec: KnobSpec, value: float) -> bool:
    """The registry's promise for a float: a rate or link knob takes a finite value in [low, high]
    whose magnitude, unless it is exactly 0, is at least min_nonzero; every other knob takes whole
    numbers, flags or names, never a float."""
    if spec.kind not in NUMERIC or not math.isfinite(value):
        return False
    if value == 0:
        return spec.low <= 0
    return spec.low <= value <= spec.high and value >= spec.min_nonzero


def specials(spec: KnobSpec) -> list[float]:
    values = [0.0, -0.0, TINIEST, -TINIEST, 1e-310, 2.2250738585072014e-308, 1e-9, 1.0, 1e308, -1e308,
              math.inf, -math.inf, math.nan]
    for bound in {float(spec.low), float(spec.high), spec.min_nonzero}:
        values += [bound, math.nextafter(bound, -math.inf), math.nextafter(bound, math.inf)]
    return values


def values(spec: KnobSpec) -> st.SearchStrategy[float]:
    return st.one_of(st.sampled_from(specials(spec)), st.floats(allow_nan=True, allow_infinity=True),
                     st.floats(min_value=-2 * spec.min_nonzero - 1e-6, max_value=2 * spec.min_nonzero + 1e-6))


def yaml_text(value: float) -> str:
    if math.isnan(value):
        return ".nan"
    if math.isinf(value):
        return ".inf" if value > 0 else "-.inf"
    return repr(value)


def with_path(doc: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    doc = copy.deepcopy(doc)
    node = doc
    *parents, last = path.split(".")
    for part in parents:
        node = node.setdefault(part, {})
    node[last] = value
    return doc


def base() -> Scenario:
    return parse_scenario(TINY, Path.cwd())


# --- the sources: each returns the scenario it built (or None) or raises a PrfaasError ------------


def from_file(spec: KnobSpec, value: float) -> Scenario:
    assert spec.path is not None
    return parse_scenario(with_path(TINY, spec.path, value), Path.cwd())


def from_set_flag(spec: KnobSpec, value: float) -> Scenario:
    return apply_overrides(base(), [f"{spec.path}={yaml_text(value)}"])


def from_timeline_set(spec: KnobSpec, value: float) -> Scenario:
    return parse_scenario(TINY | {"timeline": [{"at_s": 1.0, "set": {spec.path: value}}]}, Path.cwd())


def from_timeline_link(spec: KnobSpec, value: float) -> Scenario | None:
    if spec.kind is not ValueKind.LINK:
        return None
    return parse_scenario(TINY | {"timeline": [{"at_s": 1.0, "link": {spec.field: value}}]}, Path.cwd())


def from_lever(spec: KnobSpec, value: float) -> None:
    """The registry applied at run time, as both engines apply a timeline entry."""
    assert spec.path is not None
    scenario = base()
    registry.apply_setting(make_control_plane(scenario).state, spec.path, value, link=scenario.link,
                           has_scheduler=True)


def from_control(spec: KnobSpec, value: float) -> None:
    """An MQTT control message (NaN and infinities as JSON's non-standard tokens), then the registry."""
    if spec.control is None or spec.field is None:
        return None
    scenario = base()
    payload = json.dumps({"v": 1, spec.field: value}, allow_nan=True).encode()
    command = parse_control(spec.control.value, payload, scenario.link)
    registry.apply_command(make_control_plane(scenario).state, command, link=scenario.link, has_scheduler=True)
    return None


SOURCES: dict[str, Callable[[KnobSpec, float], Scenario | None]] = {
    "file": from_file, "--set": from_set_flag, "timeline set": from_timeline_set,
    "timeline link": from_timeline_link, "lever": from_lever, "control": from_control,
}


def outcomes(spec: KnobSpec, value: float) -> dict[str, PrfaasError | Scenario | None]:
    said: dict[str, PrfaasError | Scenario | None] = {}
    for name, source in SOURCES.items():
        try:
            said[name] = source(spec, value)
        except PrfaasError as err:
            said[name] = err
    return said


def check_refusal(spec: KnobSpec, value: float, source: str, err: PrfaasError) -> None:
    line = str(err)
    assert "\n" not in line, f"{source}: more than one line: {line!r}"
    names = {spec.field, (spec.path or "").rsplit(".", 1)[-1]} - {None}  # a message's name, a file's
    assert any(name in line for name in names), f"{source}: {line!r} does not name {names}"
    if spec.kind in NUMERIC:  # the bounds, so the fix can be followed
        shown = line.replace(",", "")
        floor = spec.min_nonzero or spec.low
        assert f"{floor:g}" in shown and f"{spec.high:g}" in shown, f"{source}: {line!r} lacks the bounds"


# --- a run that took the value ends, finite, with its record ---------------------------------------


def finite_or_none(where: str, value: object) -> None:
    if isinstance(value, float):
        assert math.isfinite(value), f"{where} = {value}"


def check_run(result: Simulation) -> None:
    assert math.isfinite(result.end_s)
    assert result.end.value in {"all_ended", "time_budget", "event_budget"}
    assert not result.gateway.core.open
    assert len(result.records) == result.gateway.core.num_arrived
    for record in result.records:
        assert record.status in ("completed", "failed")
        for field in dataclasses.fields(record):
            finite_or_none(f"{record.id}.{field.name}", getattr(record, field.name))
    for row in result.samples:
        for name, value in row.items():
            finite_or_none(f"t={row['t_s']} {name}", value)


def check_record(scenario: Scenario, result: Simulation) -> None:
    with tempfile.TemporaryDirectory() as out:
        record_run(scenario, result, out)
        requests, timeseries, doc = load_run(out)
    assert not doc.get("record_notes"), doc.get("record_notes")  # nothing was left out as non-finite
    for name, value in doc["summary"].items():
        finite_or_none(f"summary.{name}", value)
    assert doc["meta"]["engine_details"]["sim"]["end"] == result.end.value
    assert len(requests) == len(result.records)


# --- the property -----------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("spec", KNOBS, ids=[spec.path for spec in KNOBS])
@settings(max_examples=14, deadline=None)
@given(data=st.data())
def test_every_source_takes_or_refuses_a_knob_value_alike(spec: KnobSpec, data: st.DataObject) -> None:
    value = data.draw(values(spec), label="value")
    said = outcomes(spec, value)
    if not admitted(spec, value):
        for source, outcome in said.items():
            if outcome is None and source in ("timeline link", "control"):
                continue  # this knob has no such source
            assert isinstance(outcome, PrfaasError), f"{source} took {value!r} for {spec.path}"
            check_refusal(spec, value, source, outcome)
        return
    refused = {source: str(outcome) for source, outcome in said.items() if isinstance(outcome, PrfaasError)}
    assert not refused, f"{value!r} for {spec.path}: {refused}"
    at_start, mid_run = said["--set"], said["timeline set"]
    assert isinstance(at_start, Scenario) and isinstance(mid_run, Scenario)
    check_run(simulate(at_start))
    result = simulate(mid_run)
    check_run(result)
    check_record(mid_run, result)


def test_every_rate_and_delay_knob_has_a_floor_that_means_something() -> None:
    """1 kbit/s, 1 microsecond, one request in 11.6 days: below these a knob's number has no
    physical meaning (and divides a byte count into years), so none is taken."""
    floors = {spec.path: spec.min_nonzero for spec in KNOBS if spec.kind in NUMERIC}
    assert floors == {"workload.arrival.rate_per_s": 1e-6, "link.bandwidth_mbit": 0.001,
                      "link.delay_ms": 0.001, "link.jitter_ms": 0.001, "link.loss_pct": 0.0}
    assert registry.BY_PATH["link.bandwidth_mbit"].low == 0.001  # 0 is no bandwidth: cut with loss_pct 100
    assert registry.BY_PATH["link.delay_ms"].low == 0  # 0 is no added delay


# --- the reported cases, one by one --------------------------------------------------------------


def test_a_control_message_of_1e_310_mbit_is_refused_in_one_line() -> None:
    """Was: the live run took it and died on `MetricsSnapshot link_utilization=inf`."""
    with pytest.raises(PrfaasError) as caught:
        parse_control("link", b'{"v":1,"bandwidth_mbit":1e-310}', base().link)
    line = str(caught.value)
    assert "\n" not in line and "control/link.bandwidth_mbit" in line and "0.001" in line


def test_a_timeline_of_1e_310_mbit_does_not_validate() -> None:
    """Was: it passed `validate`, and the virtual engine never ended."""
    with pytest.raises(PrfaasError, match=r"^timeline\.0\.link\.bandwidth_mbit: 1e-310 .*0\.001"):
        parse_scenario(TINY | {"timeline": [{"at_s": 1.0, "link": {"bandwidth_mbit": 1e-310}}]}, Path.cwd())


def test_set_1e_310_mbit_is_refused() -> None:
    """Was: a virtual run completed 78 % of requests remotely and recorded end_s = inf."""
    with pytest.raises(PrfaasError, match=r"^link\.bandwidth_mbit: 1e-310 .*0\.001"):
        apply_overrides(base(), ["link.bandwidth_mbit=1e-310"])


def test_negative_zero_delay_is_no_delay() -> None:
    scenario = apply_overrides(base(), ["link.delay_ms=-0.0", "link.jitter_ms=-0.0"])
    assert math.copysign(1.0, scenario.link.delay_ms) == 1.0 and scenario.link.jitter_ms == 0.0
    assert math.copysign(1.0, scenario.link.jitter_ms) == 1.0
