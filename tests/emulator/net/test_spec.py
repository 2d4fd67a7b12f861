"""LinkSpec: unit conversion, per-direction shapes, and one clear line per invalid field."""

import math

import pytest

from emulator.errors import LinkSpecError
from emulator.net.spec import LinkShape, LinkSpec, parse_link_spec


def test_units_convert_once_at_the_edge():
    spec = parse_link_spec({"bandwidth_mbit": 100, "delay_ms": 10, "jitter_ms": 2})
    assert spec.rate_bytes_per_s == 12_500_000
    assert spec.delay_s == pytest.approx(0.010) and spec.jitter_s == pytest.approx(0.002)
    assert math.isinf(LinkShape().rate_bytes_per_s)  # unshaped by default


def test_reverse_direction_defaults_to_the_same_shape_and_can_differ():
    same = parse_link_spec({"bandwidth_mbit": 50, "delay_ms": 20})
    assert same.to_remote == same.to_local == LinkShape(bandwidth_mbit=50, delay_ms=20)
    asym = parse_link_spec({"bandwidth_mbit": 1000, "reverse": {"bandwidth_mbit": 10, "delay_ms": 5}})
    assert asym.to_local.bandwidth_mbit == 1000 and asym.to_remote.bandwidth_mbit == 10
    assert asym.to_remote.delay_ms == 5


@pytest.mark.parametrize(
    "data, field, fix",
    [
        ({"delay_ms": -5}, "link.delay_ms", "use 0 for no added delay"),
        ({"bandwidth_mbit": float("nan")}, "link.bandwidth_mbit", "null for an unshaped link"),
        ({"bandwidth_mbit": 0}, "link.bandwidth_mbit", "null for an unshaped link"),
        ({"bandwidth_mbit": 1e9}, "link.bandwidth_mbit", "[0.001, 400000]"),
        ({"loss_pct": 101}, "link.loss_pct", "[0, 100]"),
        ({"jitter_ms": float("inf")}, "link.jitter_ms", "use 0 for no jitter"),
        ({"queue_packets": 0}, "link.queue_packets", "whole number of packets"),
        ({"reverse": {"delay_ms": "x"}}, "link.reverse.delay_ms", "use 0"),
        ({"bogus": 1}, "link.bogus", "unknown field; remove it"),
        ({"loss_correlation_pct": 5}, "link", "needs loss_pct > 0"),
    ],
)
def test_invalid_specs_name_the_field_and_the_fix(data, field, fix):
    with pytest.raises(LinkSpecError) as err:
        parse_link_spec(data)
    line = str(err.value)
    assert "\n" not in line and line.startswith(field) and fix in line


def test_spec_round_trips_through_json():
    spec = parse_link_spec({"bandwidth_mbit": 250, "delay_ms": 40, "loss_pct": 0.5, "loss_correlation_pct": 25})
    assert LinkSpec.model_validate_json(spec.model_dump_json()) == spec
