"""The ceiling warning: which direction, which ceiling (bursts or packet by packet), and the
scenario warning that `validate` prints for a live link above the tun backend's figure."""

from __future__ import annotations

from pathlib import Path

import pytest

from emulator.net.ceiling import CEILINGS, ceiling_warnings
from emulator.net.spec import parse_link_spec
from emulator.scenario import apply_overrides, load_scenario
from emulator.scenario.rules import scenario_warnings

SCENARIOS = Path(__file__).resolve().parents[3] / "scenarios"
TUN = CEILINGS["tun"]


def test_a_rate_at_the_ceiling_is_quiet_and_above_it_is_one_line_naming_the_figure() -> None:
    assert ceiling_warnings("tun", parse_link_spec({"bandwidth_mbit": TUN.rate_mbit})) == []
    (line,) = ceiling_warnings("tun", parse_link_spec({"bandwidth_mbit": TUN.rate_mbit + 1}))
    assert line.startswith(f"link.bandwidth_mbit: {TUN.rate_mbit + 1:g} is above the tun backend's "
                           f"measured ceiling of {TUN.rate_mbit:g} Mbit/s (without loss or jitter")
    assert "\n" not in line and f"lower it to {TUN.rate_mbit:g}" in line


@pytest.mark.parametrize("effect", [{"loss_pct": 0.1}, {"jitter_ms": 1}])
def test_loss_or_jitter_is_held_to_the_per_packet_ceiling(effect: dict) -> None:
    rate = (TUN.per_packet_mbit + TUN.rate_mbit) / 2
    assert TUN.per_packet_mbit < rate <= TUN.rate_mbit
    assert ceiling_warnings("tun", parse_link_spec({"bandwidth_mbit": rate})) == []
    (line,) = ceiling_warnings("tun", parse_link_spec({"bandwidth_mbit": rate, **effect}))
    assert f"ceiling of {TUN.per_packet_mbit:g} Mbit/s (with loss or jitter, packet by packet" in line


def test_each_direction_is_named_and_unshaped_or_kernel_links_are_quiet() -> None:
    fast = TUN.rate_mbit * 2
    spec = parse_link_spec({"bandwidth_mbit": 100, "reverse": {"bandwidth_mbit": fast}})
    assert [w.split(":")[0] for w in ceiling_warnings("tun", spec)] == ["link.reverse.bandwidth_mbit"]
    both = parse_link_spec({"bandwidth_mbit": fast})
    assert [w.split(":")[0] for w in ceiling_warnings("tun", both)] == ["link.bandwidth_mbit"]
    assert ceiling_warnings("tun", parse_link_spec({})) == []
    assert ceiling_warnings("netem", both) == []


def test_validate_warns_for_a_live_link_above_the_tun_ceiling_only() -> None:
    live = load_scenario(SCENARIOS / "live-quickstart.yaml")
    fast = apply_overrides(live, [f"link.bandwidth_mbit={TUN.rate_mbit * 2:g}"])
    assert [w for w in scenario_warnings(fast) if w.startswith("link.")] == ceiling_warnings("tun", fast.link)
    assert len(ceiling_warnings("tun", fast.link)) == 1
    assert scenario_warnings(apply_overrides(fast, ["engine=virtual"])) == []


def test_a_backend_with_one_figure_does_not_speak_of_packets() -> None:
    (line,) = ceiling_warnings("proxy", parse_link_spec({"bandwidth_mbit": 5000, "loss_pct": 1}))
    assert f"ceiling of {CEILINGS['proxy'].rate_mbit:g} Mbit/s (bench/link_fidelity.py)" in line
