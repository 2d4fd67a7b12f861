"""Fixtures of the sweep tests: a small sweep file over the paper's case study, and one local Ray
per test module (starting Ray costs seconds)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from emulator.paths import REPO_ROOT
from emulator.sweep.runner import ray_session

BASE = REPO_ROOT / "scenarios" / "paper-case-study.yaml"


@pytest.fixture
def write_sweep(tmp_path: Path) -> Callable[..., Path]:
    """Write a sweep file in tmp_path: the case study for `duration_s`, the given YAML lines appended."""

    def write(body: str, name: str = "small", duration_s: float = 20) -> Path:
        path = tmp_path / f"{name}.yaml"
        path.write_text(f"name: {name}\nbase: {BASE}\nset: [duration_s={duration_s}]\n{body}")
        return path

    return write


@pytest.fixture(scope="module")
def local_ray() -> Iterator[None]:
    """A local Ray of 2 CPUs for the module; run_sweep finds it up and leaves it running."""
    with ray_session(None, 2):
        yield
