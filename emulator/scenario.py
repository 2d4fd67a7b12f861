"""A scenario file (YAML) as one frozen pydantic model, with loading, `--set` overrides and the JSON
Schema. Every problem becomes one `path.to.field: problem; fix` line of a ScenarioError. The
engines convert these models into control-plane values; nothing here runs a scenario.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import Field, ValidationError, model_validator

from emulator.errors import ScenarioError
from emulator.net.spec import LinkSpec, format_validation_error, lines_error
from emulator.scenario_overrides import PathError, check_override_path, parse_override, set_path
from emulator.scenario_parts import (
    SECTION_HINTS,
    Bounds,
    ClustersSpec,
    Count,
    Metric,
    ModelSpec,
    Name,
    Positive,
    PrefixCacheSpec,
    RouterSpec,
    SchedulerSpec,
    Section,
    TimelineEvent,
    TransportSpec,
)
from emulator.scenario_rules import static_problems
from emulator.scenario_workload import WORKLOAD_HINTS, WorkloadSpec

HINTS = {**SECTION_HINTS, **WORKLOAD_HINTS}


class Scenario(Section):
    """A whole scenario: what runs (engine, model, clusters, link), how requests are routed and
    scheduled, what arrives, what changes when, and what the summary must show."""

    name: Name
    description: str = ""
    engine: Literal["live", "virtual"]
    seed: Count = 0
    duration_s: Positive  # arrivals stop here; the run then drains
    model: ModelSpec
    clusters: ClustersSpec
    link: LinkSpec = Field(default_factory=LinkSpec)
    router: RouterSpec = RouterSpec()
    scheduler: SchedulerSpec = SchedulerSpec()
    prefix_cache: PrefixCacheSpec = PrefixCacheSpec()
    transport: TransportSpec = TransportSpec()
    workload: WorkloadSpec
    timeline: tuple[TimelineEvent, ...] = ()
    expect: dict[Metric, Bounds] = {}

    @model_validator(mode="after")
    def _sections_agree(self) -> Scenario:
        """Cross-section rules; once they hold, replay the timeline's changes and check each."""
        problems = static_problems(self) or _timeline_change_problems(self)
        if problems:
            raise lines_error(problems)
        return self


def load_scenario(path: str | Path) -> Scenario:
    """Read and validate a scenario file; relative paths inside it start at its directory."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ScenarioError(f"{path}: file not found; check the path") from None
    except UnicodeDecodeError:
        raise ScenarioError(f"{path}: not UTF-8 text; save the file as UTF-8") from None
    except OSError as err:
        raise ScenarioError(f"{path}: cannot read it ({err.strerror}); check the path") from None
    try:
        data = yaml.load(text, Loader=_UniqueKeyLoader)  # noqa: S506 (a SafeLoader subclass)
    except yaml.MarkedYAMLError as err:
        raise ScenarioError(_yaml_line(path, err)) from None
    except yaml.YAMLError as err:
        raise ScenarioError(f"{path}: YAML error ({_one_line(str(err))}); fix the syntax") from None
    if not isinstance(data, dict):
        raise ScenarioError(
            f"{path}: the top level is {type(data).__name__}, not a mapping; "
            "start the file with `name: ...`"
        )
    return parse_scenario(data, path.resolve().parent)


def parse_scenario(data: dict, base_dir: Path) -> Scenario:
    """Validate a scenario document; relative file paths in it resolve against `base_dir`."""
    if not isinstance(data, dict):
        raise ScenarioError(
            f"scenario: the document is {type(data).__name__}, not a mapping; "
            "use name: ..., engine: ..."
        )
    try:
        return Scenario.model_validate(data, context={"base_dir": Path(base_dir).resolve()})
    except ValidationError as err:
        raise ScenarioError(_format(err)) from None


def apply_overrides(scenario: Scenario, items: Iterable[str]) -> Scenario:
    """Apply `--set a.b=value` items (values parsed as YAML) and revalidate the whole scenario;
    a relative file path given here starts at the current directory, as on a command line."""
    doc = scenario.model_dump(mode="json")
    for item in items:
        path, value = parse_override(item)
        check_override_path(scenario, path)
        try:
            set_path(doc, path, value)
        except PathError as err:
            raise ScenarioError(f"--set {err}: not a section here; check the path") from None
    return parse_scenario(doc, Path.cwd())


def scenario_json_schema() -> dict[str, Any]:
    """The JSON Schema of a scenario file (editors, the dashboard's form, other tools)."""
    schema = Scenario.model_json_schema()
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", **schema}


def _format(err: ValidationError, where: str = "") -> str:
    return format_validation_error(err, where, model=Scenario, hints=HINTS)


def _timeline_change_problems(s: Scenario) -> list[str]:
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
            Scenario.model_validate(trial)
        except ValidationError as err:
            problems += _format(err, where).splitlines()
            continue
        doc = trial
    return problems


class _UniqueKeyLoader(yaml.SafeLoader):
    """SafeLoader that refuses a key given twice in one mapping (plain YAML keeps the last)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        seen: set[str] = set()
        for key_node, _ in node.value:
            if isinstance(key_node, yaml.ScalarNode) and key_node.tag != "tag:yaml.org,2002:merge":
                if key_node.value in seen:
                    problem = f"duplicate key {key_node.value!r}; keep one"
                    mark = key_node.start_mark
                    raise yaml.constructor.ConstructorError(None, None, problem, mark)
                seen.add(key_node.value)
        return super().construct_mapping(node, deep=deep)


def _yaml_line(path: Path, err: yaml.MarkedYAMLError) -> str:
    mark = err.problem_mark or err.context_mark
    where = f"{path}:{mark.line + 1}" if mark else str(path)
    what = " ".join(p for p in (err.context, err.problem) if p)
    return f"{where}: YAML syntax error ({_one_line(what)}); fix the syntax on that line"


def _one_line(text: str) -> str:
    return " ".join(text.split())
