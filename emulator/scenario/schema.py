"""A scenario file (YAML) as one frozen pydantic model, with loading, `--set` overrides and the JSON
Schema. Every problem becomes one `path.to.field: problem; fix` line of a ScenarioError. The
engines convert these models into control-plane values; nothing here runs a scenario.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import Field, ValidationError, ValidationInfo, model_validator

from emulator.errors import ScenarioError
from emulator.limits import MAX_NESTING, MAX_SCENARIO_BYTES, MAX_TEXT_CHARS, MAX_TIMELINE_EVENTS
from emulator.net.spec import FIELD_HINTS as LINK_HINTS, LinkSpec
from emulator.scenario.file_text import read_bounded_text
from emulator.scenario.model_section import ModelSpec
from emulator.scenario.overrides import PathError, check_override_path, parse_override, set_path
from emulator.scenario.parts import (
    SECTION_HINTS,
    Bounds,
    ClustersSpec,
    Duration,
    Metric,
    Name,
    PrefixCacheSpec,
    RaySpec,
    RouterSpec,
    SchedulerSpec,
    Section,
    Seed,
    TimelineEvent,
    TransportSpec,
)
from emulator.scenario.rules import static_problems
from emulator.scenario.workload import WORKLOAD_HINTS, WorkloadSpec
from emulator.scenario.yaml_reader import LimitError, describe_yaml_error, load_yaml
from emulator.validation import format_validation_error, lines_error

HINTS = {**LINK_HINTS, **SECTION_HINTS, **WORKLOAD_HINTS}


class Scenario(Section):
    """A whole scenario: what runs (engine, model, clusters, link), how requests are routed and
    scheduled, what arrives, what changes when, and what the summary must show."""

    name: Name
    description: Annotated[str, Field(max_length=MAX_TEXT_CHARS)] = ""
    engine: Literal["live", "virtual"]
    seed: Seed = 0
    duration_s: Duration  # arrivals stop here; the run then drains
    drain_s: Duration | None = None  # then what is open fails `unfinished` (None: max(duration_s, 120 s))
    model: ModelSpec
    clusters: ClustersSpec
    link: LinkSpec = Field(default_factory=LinkSpec)
    router: RouterSpec = RouterSpec()
    scheduler: SchedulerSpec = SchedulerSpec()
    prefix_cache: PrefixCacheSpec = PrefixCacheSpec()
    transport: TransportSpec = TransportSpec()
    ray: RaySpec | None = None  # live workers on a Ray cluster's nodes (emulator/live/ray_workers.py)
    workload: WorkloadSpec
    timeline: tuple[TimelineEvent, ...] = Field(default=(), max_length=MAX_TIMELINE_EVENTS)
    expect: dict[Metric, Bounds] = {}

    @model_validator(mode="after")
    def _sections_agree(self, info: ValidationInfo) -> Scenario:
        """Cross-section rules; once they hold, replay the timeline's changes and check each."""
        problems = static_problems(self) or _timeline_change_problems(self, info.context)
        if problems:
            raise lines_error(problems)
        return self


def load_scenario(path: str | Path) -> Scenario:
    """Read and validate a scenario file; relative paths inside it start at its directory, and the
    files it names may also lie in that directory (the user named this file)."""
    path = Path(path)
    text = read_scenario_text(path)
    try:
        data = load_yaml(text)
    except yaml.YAMLError as err:
        line, problem = describe_yaml_error(err)
        where = f"{path}:{line}" if line else str(path)
        if isinstance(err, LimitError):  # the problem already says how to fix it
            raise ScenarioError(f"{where}: {problem}") from None
        raise ScenarioError(f"{where}: YAML syntax error ({problem}); fix the syntax on that line") from None
    if not isinstance(data, dict):
        raise ScenarioError(
            f"{path}: the top level is {type(data).__name__}, not a mapping; "
            "start the file with `name: ...`"
        )
    base_dir = path.resolve().parent
    return parse_scenario(data, base_dir, trusted_dir=base_dir)


def read_scenario_text(path: Path) -> str:
    """A regular file of at most MAX_SCENARIO_BYTES, checked before reading (file_text.py)."""
    return read_bounded_text(path, MAX_SCENARIO_BYTES, what="a scenario YAML file",
                             too_large_fix="a scenario is a few KiB, point workload.trace at large data instead")


def parse_scenario(data: dict, base_dir: Path, trusted_dir: Path | None = None) -> Scenario:
    """Validate a scenario document; relative file paths in it resolve against `base_dir`. Files it
    names must lie under shared_data.readable_roots(), or under `trusted_dir` when given (the
    directory of a scenario file the user named)."""
    if not isinstance(data, dict):
        raise ScenarioError(
            f"scenario: the document is {type(data).__name__}, not a mapping; "
            "use name: ..., engine: ..."
        )
    context = {"base_dir": Path(base_dir).resolve(), "trusted_dir": trusted_dir}
    try:
        return Scenario.model_validate(data, context=context)
    except ValidationError as err:
        raise ScenarioError(_format(err)) from None
    except RecursionError:  # a document built in Python (not YAML, which is depth-capped)
        raise ScenarioError(f"scenario: nested deeper than {MAX_NESTING} levels; flatten it") from None


def apply_overrides(scenario: Scenario, items: Iterable[str]) -> Scenario:
    """Apply `--set a.b=value` items (values parsed as YAML) and revalidate the whole scenario;
    a relative file path given here starts at the current directory, as on a command line."""
    doc = scenario.model_dump(mode="json")
    problems = []  # every bad item is named, not only the first
    for item in items:
        try:
            path, value = parse_override(item)
            check_override_path(scenario, path)
            set_path(doc, path, value)
        except ScenarioError as err:
            problems.append(str(err))
        except PathError as err:
            problems.append(f"--set {err}: not a section here; check the path")
    try:
        result = parse_scenario(doc, Path.cwd())  # the good items' values, checked as a whole
    except ScenarioError as err:
        problems += str(err).splitlines()
    if problems:
        raise ScenarioError("\n".join(problems))
    return result


def scenario_json_schema() -> dict[str, Any]:
    """The JSON Schema of a scenario file (editors, the dashboard's form, other tools)."""
    schema = Scenario.model_json_schema()
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", **schema}


def _format(err: ValidationError, where: str = "") -> str:
    return format_validation_error(err, where, model=Scenario, hints=HINTS)


def _timeline_change_problems(s: Scenario, context: dict | None) -> list[str]:
    """Apply each `link:` and `set:` event in order to the document and revalidate it, so a change
    obeys the same rules as the file (a threshold below 0 or a link at NaN Mbit/s is refused)."""
    doc = s.model_dump(mode="json", exclude={"timeline", "expect"})
    problems: list[str] = []
    for i, event in enumerate(s.timeline):
        trial = copy.deepcopy(doc)
        if event.link is not None:
            trial["link"] = {**trial["link"], **event.link}
            where = f"timeline.{i}"
        elif event.set is not None:
            where = f"timeline.{i}.set"
            try:
                for key, value in event.set.items():
                    set_path(trial, key, value)
            except PathError as err:
                problems.append(f"{where}.{key}: this scenario has no {err}; remove the knob")
                continue
        else:
            continue
        try:
            Scenario.model_validate(trial, context=context)
        except ValidationError as err:
            problems += _format(err, where).splitlines()
            continue
        doc = trial
    return problems
