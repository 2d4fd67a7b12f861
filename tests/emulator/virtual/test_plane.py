"""The virtual engine drives the control plane the live engine drives: the objects that
emulator.plane builds, not copies, of the control package's own classes."""

from __future__ import annotations

import ast
from collections.abc import Callable
from pathlib import Path

from emulator.control.prefix_cache import PrefixCacheIndex
from emulator.control.router import Router
from emulator.control.scheduler import DualTimescaleScheduler
from emulator.plane import make_control_plane
from emulator.scenario import Scenario
from emulator.virtual.engine import simulate

ROOT = Path(__file__).resolve().parents[3]


def _imports_make_control_plane(path: Path) -> bool:
    tree = ast.parse(path.read_text())
    return any(isinstance(node, ast.ImportFrom) and node.module == "emulator.plane"
               and any(alias.name == "make_control_plane" for alias in node.names)
               for node in ast.walk(tree))


def test_the_gateway_holds_the_planes_objects_of_the_control_classes(small: Callable[..., Scenario]) -> None:
    scenario = small(scheduler={"short_term": {"enabled": True}, "long_term": {"enabled": False}})
    plane = make_control_plane(scenario)
    result = simulate(scenario, plane=plane)
    core = result.gateway.core
    assert core.router is plane.router and core.index is plane.index
    assert core.scheduler is plane.scheduler and plane.router.index is plane.index
    assert type(plane.router) is Router and type(plane.index) is PrefixCacheIndex
    assert type(plane.scheduler) is DualTimescaleScheduler
    assert result.plane is plane


def test_both_engines_build_their_control_plane_with_the_one_factory() -> None:
    assert _imports_make_control_plane(ROOT / "emulator" / "virtual" / "engine.py")
    live_session = ROOT / "emulator" / "live" / "session.py"
    assert _imports_make_control_plane(live_session)
    virtual_sources = "".join(p.read_text() for p in (ROOT / "emulator" / "virtual").glob("*.py"))
    for constructor in ("Router(", "PrefixCacheIndex(", "DualTimescaleScheduler("):
        assert constructor not in virtual_sources  # no second construction site
