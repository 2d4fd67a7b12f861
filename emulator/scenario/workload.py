"""The scenario's `workload:` section: arrival processes, length distributions, trace replay.

Only the shape of the section; drawing requests from it is emulator/workload's job. Relative file
paths resolve against the scenario file's directory (passed as validation context `base_dir`).
"""

from __future__ import annotations

import os
import reprlib
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BeforeValidator, Field, ValidationInfo
from pydantic_core import PydanticCustomError

from emulator.limits import (
    MAX_CV,
    MAX_DURATION_S,
    MAX_LOG_MU,
    MAX_LOG_SIGMA,
    MAX_PREFIXES,
    MAX_RATE_CHANGES,
    MAX_RATE_PER_S,
    MAX_REQUESTS,
    MAX_SHARED_BLOCKS,
    MAX_TOKENS,
    MAX_TRACE_SCALE,
    MIN_RATE_PER_S,
)
from emulator.scenario.parts import Moment, Requests, Section, Tokens
from emulator.scenario.shared_data import DATA_DIRS_ENV, may_read, relocate, shared_dir
from emulator.validation import FIELD_ERROR

MOONCAKE_BLOCK_TOKENS = 512  # the block a Mooncake trace's hash_ids each stand for (FAST'25 traces)
Rate = Annotated[float, Field(strict=True, ge=MIN_RATE_PER_S, le=MAX_RATE_PER_S)]  # the rate knob's bounds
AUTO_RATE = "auto"


def _rate_or_auto(value: Any) -> Any:
    """One clear error instead of one per union member (a number, 'auto')."""
    if value == AUTO_RATE or (type(value) in (int, float) and MIN_RATE_PER_S <= value <= MAX_RATE_PER_S):
        return value
    raise PydanticCustomError(FIELD_ERROR, "{text}", {"text": (
        f"{reprlib.repr(value)} is neither a rate nor auto; use a rate from {MIN_RATE_PER_S:g} to "
        f"{MAX_RATE_PER_S:g} requests per second, or auto to size it to the machine")})


# A generated workload's rate: requests per second, or `auto`, which each engine resolves at start to
# AUTO_LOAD (60%) of what the run's workers sustain (emulator/auto_rate.py), within the same bounds.
ArrivalRate = Annotated[Rate | Literal["auto"], BeforeValidator(_rate_or_auto)]
Period = Annotated[float, Field(strict=True, gt=0, le=MAX_DURATION_S)]
Scale = Annotated[float, Field(strict=True, ge=1 / MAX_TRACE_SCALE, le=MAX_TRACE_SCALE)]


def _resolve_file(value: Path, info: ValidationInfo) -> Path:
    """Anchor a relative path at the scenario file's directory, keep it inside the folders a
    scenario may read (shared_data.may_read), and require a regular file, so a typo fails at
    `validate`, not minutes into a run. Nothing of the file is read here."""
    context = info.context or {}
    base = Path(context.get("base_dir") or Path.cwd())
    path = Path(os.path.normpath(base / value))
    try:
        is_file = path.is_file()
    except (OSError, ValueError):  # a name too long, an embedded NUL byte
        is_file = False
    found = path if is_file else relocate(path)
    if not may_read(found or path, context.get("trusted_dir")):
        raise PydanticCustomError(FIELD_ERROR, "{text}", {"text": (
            f"{path} is outside the folders scenario files may read from (the repository, "
            f"{shared_dir() / 'traces'}, the scenario file's folder, {DATA_DIRS_ENV}); move the file "
            f"into one of them or add its folder to {DATA_DIRS_ENV}")})
    if found is None:
        raise PydanticCustomError("file_not_found", "no file at {path}", {"path": str(path)})
    return found


InputFile = Annotated[Path, AfterValidator(_resolve_file)]


class PoissonArrival(Section):
    kind: Literal["poisson"]
    rate_per_s: ArrivalRate


class GammaArrival(Section):
    """Bursty arrivals: gamma inter-arrival times, coefficient of variation `cv` (1: Poisson)."""

    kind: Literal["gamma"]
    rate_per_s: ArrivalRate
    cv: Annotated[float, Field(strict=True, gt=0, le=MAX_CV)]


class OnOffArrival(Section):
    """Poisson at `rate_per_s` for `on_s`, then silent for `off_s`, repeated."""

    kind: Literal["on-off"]
    rate_per_s: ArrivalRate
    on_s: Period
    off_s: Moment


Arrival = Annotated[PoissonArrival | GammaArrival | OnOffArrival, Field(discriminator="kind")]


class FixedLength(Section):
    kind: Literal["fixed"]
    tokens: Tokens


class UniformLength(Section):
    kind: Literal["uniform"]
    min: Tokens
    max: Tokens


class LognormalLength(Section):
    """The paper's input lengths: exp(N(mu, sigma^2)) truncated to [min, max] tokens."""

    kind: Literal["lognormal"]
    mu: Annotated[float, Field(strict=True, ge=-MAX_LOG_MU, le=MAX_LOG_MU)]
    sigma: Annotated[float, Field(strict=True, gt=0, le=MAX_LOG_SIGMA)]
    min: Tokens
    max: Tokens


class EmpiricalLength(Section):
    """Lengths drawn from a text file, one whole number of tokens per line."""

    kind: Literal["empirical"]
    path: InputFile


LengthDist = Annotated[
    FixedLength | UniformLength | LognormalLength | EmpiricalLength, Field(discriminator="kind")
]


class RateChange(Section):
    """From `at_s` on, arrivals run at `rate_per_s` (piecewise-constant rate)."""

    at_s: Moment
    rate_per_s: Rate


class PrefixSharingSpec(Section):
    """Synthetic shared prefixes: each request starts with one of `num_prefixes` prefixes."""

    num_prefixes: Annotated[int, Field(strict=True, ge=1, le=MAX_PREFIXES)]
    shared_blocks: Annotated[int, Field(strict=True, ge=1, le=MAX_SHARED_BLOCKS)]


class TraceSpec(Section):
    """A trace replays whole unless max_requests caps it (duration_s still ends arrivals). A row
    that cannot be read fails the run, or with `bad_rows: skip` is passed over and counted."""

    format: Literal["mooncake", "azure"]
    path: InputFile
    time_scale: Scale = 1.0
    length_scale: Scale = 1.0
    max_requests: Requests | None = None
    bad_rows: Literal["fail", "skip"] = "fail"


class WorkloadSpec(Section):
    """Either generated (arrival + input_len + output_len) or a trace replay, never both."""

    arrival: Arrival | None = None
    rate_changes: tuple[RateChange, ...] = Field(default=(), max_length=MAX_RATE_CHANGES)
    input_len: LengthDist | None = None
    output_len: LengthDist | None = None
    prefix_sharing: PrefixSharingSpec | None = None
    trace: TraceSpec | None = None
    max_requests: Requests | None = None  # no cap but the ceiling (MAX_REQUESTS); a cap is stated

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
_TOKENS = f"use a whole number of tokens from 1 to {MAX_TOKENS:,}"
_SECONDS = f"at most {MAX_DURATION_S:,.0f}"
WORKLOAD_HINTS: dict[str, str] = {
    "arrival": _ARRIVAL_KINDS,
    "input_len": _LENGTH_KINDS,
    "output_len": _LENGTH_KINDS,
    "rate_per_s": f"use a rate from {MIN_RATE_PER_S:g} to {MAX_RATE_PER_S:g} requests per second",
    "cv": f"use a positive coefficient of variation (1 = Poisson), at most {MAX_CV:g}",
    "on_s": f"use a positive number of seconds, {_SECONDS}",
    "off_s": f"use seconds >= 0, {_SECONDS}",
    "rate_changes": f"give at most {MAX_RATE_CHANGES:,} changes",
    "tokens": _TOKENS,
    "input_len.min": _TOKENS,
    "input_len.max": _TOKENS,
    "output_len.min": _TOKENS,
    "output_len.max": _TOKENS,
    "mu": f"use a number from {-MAX_LOG_MU:g} to {MAX_LOG_MU:g}",
    "sigma": f"use a positive number, at most {MAX_LOG_SIGMA:g}",
    "path": "check the path; a relative path starts at the scenario file's directory",
    "format": "use mooncake or azure",
    "time_scale": (f"use a factor from {1 / MAX_TRACE_SCALE:g} to {MAX_TRACE_SCALE:g}; "
                   "trace timestamps are multiplied by it"),
    "length_scale": (f"use a factor from {1 / MAX_TRACE_SCALE:g} to {MAX_TRACE_SCALE:g}; "
                     "trace lengths are multiplied by it"),
    "max_requests": f"use a whole number of requests, 1 to {MAX_REQUESTS:,}, or null for no cap",
    "bad_rows": "use fail (a bad trace row stops the run) or skip (it is passed over and counted)",
    "num_prefixes": f"use a whole number, 1 to {MAX_PREFIXES:,}",
    "shared_blocks": f"use a whole number of blocks, 1 to {MAX_SHARED_BLOCKS:,}",
}
