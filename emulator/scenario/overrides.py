"""Dotted paths into a scenario document: the `--set a.b=value` flag and the runtime knobs a
timeline `set:` (or the dashboard) may turn. Edits plain documents only; emulator.scenario
revalidates every edited document as a whole.
"""

from __future__ import annotations

from typing import Any

import yaml
from pydantic import BaseModel

from emulator.errors import ScenarioError
from emulator.knobs import BY_PATH
from emulator.limits import MAX_SCENARIO_BYTES
from emulator.scenario.yaml_reader import LimitError, describe_yaml_error, load_yaml

# Knob path -> what turning it does (emulator.knobs defines each knob once). Values are
# validated by the same rules as the file's fields.
KNOBS: dict[str, str] = {path: spec.help for path, spec in BY_PATH.items()}


class PathError(Exception):
    """A dotted path leads through something that is not a mapping; carries the path so far."""


def set_path(doc: dict, dotted: str, value: Any) -> None:
    """Set `doc[a][b][c] = value` for `a.b.c` (list items by index); PathError where it cannot."""
    parts = dotted.split(".")
    node: Any = doc
    for depth, part in enumerate(parts[:-1]):
        node = _child(node, part, ".".join(parts[: depth + 1]))
    last = parts[-1]
    if isinstance(node, dict):
        node[last] = value
    elif isinstance(node, list) and last.isdigit() and int(last) < len(node):
        node[int(last)] = value
    else:
        raise PathError(dotted)


def _child(node: Any, part: str, here: str) -> Any:
    if isinstance(node, dict) and isinstance(node.get(part), dict | list):
        return node[part]
    if isinstance(node, list) and part.isdigit() and int(part) < len(node):
        return node[int(part)]
    raise PathError(here)


def parse_override(item: str) -> tuple[str, Any]:
    """`a.b=value` -> ("a.b", value parsed as YAML: 8000 -> int, true -> bool, empty -> null)."""
    path, sep, text = item.partition("=")
    path = path.strip()
    if not sep or not path:
        raise ScenarioError(f"--set {_clip(item)}: not path=value; write e.g. router.policy=local-only")
    if len(text) > MAX_SCENARIO_BYTES:
        raise ScenarioError(f"--set {_clip(path)}: a value of more than {MAX_SCENARIO_BYTES:,} "
                            "characters; put it in the scenario file")
    try:
        return path, load_yaml(text)
    except LimitError as err:
        raise ScenarioError(f"--set {_clip(path)}: {describe_yaml_error(err)[1]}") from None
    except yaml.YAMLError:
        raise ScenarioError(f"--set {_clip(path)}: {_clip(text)!r} is not a YAML value; quote it") from None


def _clip(text: str, limit: int = 60) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def check_override_path(scenario: BaseModel, dotted: str) -> None:
    """Refuse a path that names no field: walk the validated scenario itself, so sections follow
    their real type (a poisson arrival has no `cv`) and mappings such as `expect` take new keys."""
    obj: Any = scenario
    parts = dotted.split(".")
    for depth, part in enumerate(parts):
        here = ".".join(parts[: depth + 1])
        is_last = depth == len(parts) - 1
        if isinstance(obj, BaseModel):
            fields = type(obj).model_fields
            if part not in fields:
                raise ScenarioError(f"--set {here}: unknown path; known here: {', '.join(fields)}")
            obj = getattr(obj, part)
        elif isinstance(obj, dict):
            obj = obj.get(part)
        elif isinstance(obj, tuple):
            if not (part.isdigit() and int(part) < len(obj)):
                raise ScenarioError(f"--set {here}: no such item; use an index below {len(obj)}")
            obj = obj[int(part)]
        else:
            raise ScenarioError(f"--set {here}: unknown path; its parent holds a plain value")
        if obj is None and not is_last:
            raise ScenarioError(
                f"--set {here}: this scenario has no {here}; set the whole section in the file"
            )
