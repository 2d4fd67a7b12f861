"""The scenario's `model:` section: a model_stub preset (what the live engine runs), a measured
`profile`, or a `profile_file` that holds one (what `python -m emulator calibrate --machine` writes),
read here as untrusted input. Which combinations each engine takes, and the checks that compare the
tables with the clusters, are rules.py's.
"""

from __future__ import annotations

import os
import textwrap
from pathlib import Path
from typing import Annotated, Literal

import yaml
from pydantic import Field, PrivateAttr, ValidationError, model_validator

from emulator.errors import ScenarioError
from emulator.limits import MAX_HOST_CORES, MAX_PROFILE_FILE_BYTES
from emulator.scenario.file_text import read_bounded_text
from emulator.scenario.parts import SECTION_HINTS, Flag, NonNegative, ProfileSpec, Section, Tokens
from emulator.scenario.workload import InputFile
from emulator.scenario.yaml_reader import describe_yaml_error, load_yaml
from emulator.validation import format_validation_error, lines_error
from model_stub.config import PRESET_NAMES, SIZES

Text = Annotated[str, Field(max_length=256)]
MAX_CACHED_FILES = 16


class Provenance(Section):
    """Where a profile file's numbers came from: `measured:` beside its `model:` (all optional)."""

    kind: Literal["machine", "run"] | None = None
    date: Text | None = None
    host: Text | None = None
    preset: Literal[PRESET_NAMES] | None = None  # type: ignore[valid-type]
    size: Literal[SIZES] | None = None  # type: ignore[valid-type]
    git_sha: Text | None = None
    scenario: Text | None = None
    cores: Annotated[int, Field(strict=True, ge=1, le=MAX_HOST_CORES)] | None = None
    quick: Flag | None = None
    reps: Annotated[int, Field(strict=True, ge=1, le=1_000)] | None = None
    worker_nice: Annotated[int, Field(strict=True, ge=-20, le=19)] | None = None
    threads_per_worker: Annotated[int, Field(strict=True, ge=1, le=1_024)] | None = None
    busy_op_tokens: Tokens | None = None
    decode_cache_tokens: Tokens | None = None
    wall_s: NonNegative | None = None
    # The machine's speed when measured (emulator/live/speed_reference.py): one idle probe's median
    # prefill of busy_op_tokens, and the factor a rescaled file's times were multiplied by.
    reference_prefill_s: Annotated[float, Field(strict=True, gt=0, le=3_600)] | None = None
    speed_scale: Annotated[float, Field(strict=True, gt=0, le=100)] | None = None
    # The most other load (cores) a CPU-sharing round kept (emulator/live/cpu_meter.py).
    foreign_cores: Annotated[float, Field(strict=True, ge=0, le=MAX_HOST_CORES)] | None = None
    # What the live stack adds to the probes' times (emulator/virtual/stack_factors.py), already in
    # the tables, and how many requests of the stack run measured it.
    stack_prefill_factor: Annotated[float, Field(strict=True, gt=0, le=100)] | None = None
    stack_prefill_s: Annotated[float, Field(strict=True, ge=0, le=60)] | None = None  # per prefill, besides
    stack_decode_factor: Annotated[float, Field(strict=True, gt=0, le=100)] | None = None
    stack_requests: Annotated[int, Field(strict=True, ge=1, le=1_000_000)] | None = None
    note: Annotated[str, Field(max_length=4_096)] | None = None


class ProfileModel(Section):
    profile: ProfileSpec


class ProfileFile(Section):
    """A profile file: `model: {profile: ...}` as a scenario would hold it, and its provenance."""

    measured: Provenance | None = None
    model: ProfileModel


class ModelSpec(Section):
    """`preset` (a model_stub preset the live engine runs) and/or what the virtual engine costs:
    `profile` or `profile_file` (a path relative to the scenario file's folder). A live scenario may
    name a profile_file for the same scenario on the virtual engine; the live engine ignores it."""

    preset: Literal[PRESET_NAMES] | None = None  # type: ignore[valid-type]
    size: Literal[SIZES] | None = None  # type: ignore[valid-type]
    profile: ProfileSpec | None = None
    profile_file: InputFile | None = None
    _file: ProfileFile | None = PrivateAttr(default=None)

    @model_validator(mode="after")
    def _read_profile_file(self) -> ModelSpec:
        if self.profile_file is not None:
            try:
                self._file = read_profile_file(self.profile_file)
            except ScenarioError as err:
                raise lines_error([f"model.profile_file: {line}" for line in str(err).splitlines()]) from None
        return self

    @property
    def preset_size(self) -> str:
        return self.size or "small"

    @property
    def measured_profile(self) -> ProfileSpec | None:
        """The profile the virtual engine costs work by: `profile`, else the file's."""
        if self.profile is not None:
            return self.profile
        return None if self._file is None else self._file.model.profile

    @property
    def provenance(self) -> Provenance | None:
        return None if self._file is None else self._file.measured

    @property
    def profile_where(self) -> str:
        """Where the measured profile's fields are, as error lines name them."""
        if self.profile is None and self.profile_file is not None:
            return f"model.profile_file ({self.profile_file.name}): model.profile"
        return "model.profile"


# A scenario revalidates once per timeline change: a file already read, unchanged since, is not
# read again (keyed by path, size and modification time).
_cache: dict[tuple[str, int, int], ProfileFile] = {}


def read_profile_file(path: Path) -> ProfileFile:
    """A profile file, bounded (MAX_PROFILE_FILE_BYTES, the YAML reader's limits) and validated;
    ScenarioError lines `PATH: problem; fix` otherwise."""
    try:
        info = os.stat(path)
        key = (str(path), info.st_size, info.st_mtime_ns)
    except (OSError, ValueError):
        key = None
    if key is not None and key in _cache:
        return _cache[key]
    text = read_bounded_text(path, MAX_PROFILE_FILE_BYTES, what="a profile YAML file",
                             too_large_fix="a profile file is a few KiB; name the file `calibrate` wrote")
    try:
        data = load_yaml(text)
    except yaml.YAMLError as err:
        line, problem = describe_yaml_error(err)
        raise ScenarioError(f"{path}:{line or '?'}: {problem}; fix the YAML on that line") from None
    if not isinstance(data, dict):
        raise ScenarioError(f"{path}: the top level is {type(data).__name__}, not a mapping; "
                            "start the file with `model: {profile: ...}`")
    try:
        loaded = ProfileFile.model_validate(data)
    except ValidationError as err:
        lines = format_validation_error(err, "", model=ProfileFile, hints=SECTION_HINTS).splitlines()
        raise ScenarioError("\n".join(f"{path}: {line}" for line in lines)) from None
    if key is not None:
        if len(_cache) >= MAX_CACHED_FILES:
            _cache.pop(next(iter(_cache)))
        _cache[key] = loaded
    return loaded


def significant(value: float) -> float:
    """A profile file's number: five significant digits, never rounded to zero (its schema wants
    positive times)."""
    rounded = float(f"{value:.5g}")
    return rounded if rounded > 0 else float(f"{value:.1e}")


def write_profile_file(loaded: ProfileFile, path: Path, how: str) -> Path:
    """`loaded` at `path` (folders made), headed by what was measured, where and when, then `how`
    (the command that made this file)."""
    m = loaded.measured
    what = (f"Machine profile: {m.preset} ({m.size}) on {m.host}, measured {m.date} at git {m.git_sha}"
            if m is not None else "Profile")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(profile_file_yaml(loaded, f"{what}; {how}"), encoding="utf-8")
    return path


def profile_file_yaml(loaded: ProfileFile, header: str) -> str:
    """A profile file's text: `header` as comment lines, then the document (defaults left out)."""
    comment = "\n".join(f"# {line}" for line in textwrap.wrap(" ".join(header.split()), 98))
    body = yaml.safe_dump(loaded.model_dump(mode="json", exclude_defaults=True), sort_keys=False,
                          default_flow_style=None)
    return f"{comment}\n{body}"
