"""The scenario's `workload:` section: arrival processes, length distributions, trace replay.

Only the shape of the section; drawing requests from it is emulator/workload's job. Relative file
paths resolve against the scenario file's directory (passed as validation context `base_dir`).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Literal

from pydantic import AfterValidator, Field, ValidationInfo
from pydantic_core import PydanticCustomError

from emulator.scenario_parts import NonNegative, Number, Positive, PositiveCount, Section
from emulator.shared_data import relocate


def _resolve_file(value: Path, info: ValidationInfo) -> Path:
    """Anchor a relative path at the scenario file's directory and require the file to exist, so a
    typo fails at `validate`, not minutes into a run."""
    base = Path((info.context or {}).get("base_dir") or Path.cwd())
    path = Path(os.path.normpath(base / value))
    try:
        is_file = path.is_file()
    except (OSError, ValueError):  # a name too long, an embedded NUL byte
        is_file = False
    if not is_file:
        moved = relocate(path)
        if moved is not None:
            return moved
        raise PydanticCustomError("file_not_found", "no file at {path}", {"path": str(path)})
    return path


InputFile = Annotated[Path, AfterValidator(_resolve_file)]


class PoissonArrival(Section):
    kind: Literal["poisson"]
    rate_per_s: Positive


class GammaArrival(Section):
    """Bursty arrivals: gamma inter-arrival times, coefficient of variation `cv` (1: Poisson)."""

    kind: Literal["gamma"]
    rate_per_s: Positive
    cv: Positive


class OnOffArrival(Section):
    """Poisson at `rate_per_s` for `on_s`, then silent for `off_s`, repeated."""

    kind: Literal["on-off"]
    rate_per_s: Positive
    on_s: Positive
    off_s: NonNegative


Arrival = Annotated[PoissonArrival | GammaArrival | OnOffArrival, Field(discriminator="kind")]


class FixedLength(Section):
    kind: Literal["fixed"]
    tokens: PositiveCount


class UniformLength(Section):
    kind: Literal["uniform"]
    min: PositiveCount
    max: PositiveCount


class LognormalLength(Section):
    """The paper's input lengths: exp(N(mu, sigma^2)) truncated to [min, max] tokens."""

    kind: Literal["lognormal"]
    mu: Number
    sigma: Positive
    min: PositiveCount
    max: PositiveCount


class EmpiricalLength(Section):
    """Lengths drawn from a text file, one whole number of tokens per line."""

    kind: Literal["empirical"]
    path: InputFile


LengthDist = Annotated[
    FixedLength | UniformLength | LognormalLength | EmpiricalLength, Field(discriminator="kind")
]


class RateChange(Section):
    """From `at_s` on, arrivals run at `rate_per_s` (piecewise-constant rate)."""

    at_s: NonNegative
    rate_per_s: Positive


class PrefixSharingSpec(Section):
    """Synthetic shared prefixes: each request starts with one of `num_prefixes` prefixes."""

    num_prefixes: PositiveCount
    shared_blocks: PositiveCount


class TraceSpec(Section):
    format: Literal["mooncake", "azure"]
    path: InputFile
    time_scale: Positive = 1.0
    length_scale: Positive = 1.0
    max_requests: PositiveCount | None = None


class WorkloadSpec(Section):
    """Either generated (arrival + input_len + output_len) or a trace replay, never both."""

    arrival: Arrival | None = None
    rate_changes: tuple[RateChange, ...] = ()
    input_len: LengthDist | None = None
    output_len: LengthDist | None = None
    prefix_sharing: PrefixSharingSpec | None = None
    trace: TraceSpec | None = None
    max_requests: PositiveCount = 10_000

    @property
    def is_trace(self) -> bool:
        return self.trace is not None


_LENGTH_KINDS = (
    "use kind: fixed (tokens), uniform (min, max), lognormal (mu, sigma, min, max) "
    "or empirical (path)"
)
_ARRIVAL_KINDS = (
    "use kind: poisson (rate_per_s), gamma (rate_per_s, cv) or on-off (rate_per_s, on_s, off_s)"
)
WORKLOAD_HINTS: dict[str, str] = {
    "arrival": _ARRIVAL_KINDS,
    "input_len": _LENGTH_KINDS,
    "output_len": _LENGTH_KINDS,
    "rate_per_s": "use a positive rate in requests per second",
    "cv": "use a positive coefficient of variation (1 = Poisson)",
    "on_s": "use a positive number of seconds",
    "off_s": "use seconds >= 0",
    "tokens": "use a whole number of tokens, >= 1",
    "input_len.min": "use a whole number of tokens, >= 1",
    "input_len.max": "use a whole number of tokens, >= 1",
    "output_len.min": "use a whole number of tokens, >= 1",
    "output_len.max": "use a whole number of tokens, >= 1",
    "sigma": "use a positive number",
    "path": "check the path; a relative path starts at the scenario file's directory",
    "format": "use mooncake or azure",
    "time_scale": "use a positive factor; trace timestamps are multiplied by it",
    "length_scale": "use a positive factor; trace lengths are multiplied by it",
    "max_requests": "use a whole number of requests, >= 1",
    "num_prefixes": "use a whole number, >= 1",
    "shared_blocks": "use a whole number of blocks, >= 1",
}
