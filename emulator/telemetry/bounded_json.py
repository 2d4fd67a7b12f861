"""JSON from outside (an MQTT payload, a file), decoded only once it is known to be small and shallow.

CPython's decoder recurses once per nesting level, so a few KB of `[[[[...` raise RecursionError
out of `json.loads`; the size is checked before any decoding and the depth by a linear scan of the
text, so nothing but a one-line TelemetryError leaves `loads_bounded`. A key given twice in one
object is refused, wherever it is: `json.loads` would keep the last silently, so two readers of the
same bytes could disagree on what they said. Schemas live elsewhere.
"""

from __future__ import annotations

import json
from typing import Any

from emulator.errors import TelemetryError
from emulator.telemetry.payload_errors import MAX_SHOWN_CHARS, clip


def loads_bounded(payload: bytes, where: str, *, max_bytes: int, max_depth: int, fix: str) -> Any:
    """Decode UTF-8 JSON of at most `max_bytes` bytes and `max_depth` nested arrays/objects.

    Refuses NaN and Infinity (not JSON) and any object that gives a key twice (the error names its
    path, e.g. `a[1].b`). Errors read `<where>: <problem>; <fix>`.
    """
    if len(payload) > max_bytes:
        raise TelemetryError(f"{where}: payload of {len(payload)} bytes is over the "
                             f"{max_bytes}-byte limit; {fix}")
    try:
        text = payload.decode("utf-8")
    except UnicodeDecodeError as err:
        raise TelemetryError(f"{where}: payload is not UTF-8 (byte {err.start}); {fix}") from None
    if nesting_depth(text, max_depth) > max_depth:
        raise TelemetryError(f"{where}: payload nests deeper than {max_depth} levels; {fix}")
    duplicates: list[str] = []  # set by the hook; the path is found only when there is one
    try:
        data = json.loads(text, parse_constant=_refuse_constant,
                          object_pairs_hook=lambda pairs: _to_dict(pairs, duplicates))
    except RecursionError:  # only if the scan above missed a level; never let it out
        raise TelemetryError(f"{where}: payload nests too deep; {fix}") from None
    except ValueError as err:
        raise TelemetryError(f"{where}: payload is not JSON ({str(err)[:80]}); {fix}") from None
    if duplicates:
        path = clip(_path_to_duplicate(data) or duplicates[0], 2 * MAX_SHOWN_CHARS)
        raise TelemetryError(f"{where}: key {path!r} is given twice; give each key once; {fix}")
    return data


def nesting_depth(text: str, stop_above: int) -> int:
    """The deepest `[`/`{` nesting outside strings (an upper bound on what the decoder recurses);
    returns early once it passes `stop_above`."""
    depth = deepest = 0
    is_in_string = is_escaped = False
    for char in text:
        if is_in_string:
            if is_escaped:
                is_escaped = False
            elif char == "\\":
                is_escaped = True
            elif char == '"':
                is_in_string = False
        elif char == '"':
            is_in_string = True
        elif char in "[{":
            depth += 1
            if depth > deepest:
                deepest = depth
                if deepest > stop_above:
                    return deepest
        elif char in "]}":
            depth = max(depth - 1, 0)
    return deepest


class _Duplicated(dict):
    """An object that gave `key` twice (the last value kept, as json.loads would)."""

    duplicate: str


def _to_dict(pairs: list[tuple[str, Any]], duplicates: list[str]) -> dict[str, Any]:
    obj = dict(pairs)
    if len(obj) == len(pairs):
        return obj
    seen: set[str] = set()
    marked = _Duplicated(obj)
    for key, _ in pairs:
        if key in seen:
            marked.duplicate = key
            break
        seen.add(key)
    duplicates.append(marked.duplicate)
    return marked


def _path_to_duplicate(data: Any) -> str | None:
    """Where the first object (in document order) that gave a key twice is: `a[1].b`. The tree is
    at most max_depth deep and max_bytes wide, so a walk with an explicit stack is bounded."""
    stack: list[tuple[str, Any]] = [("", data)]
    while stack:
        path, node = stack.pop()
        if isinstance(node, _Duplicated):
            return f"{path}.{clip(node.duplicate)}".removeprefix(".")
        if isinstance(node, dict):
            stack.extend((f"{path}.{clip(key)}", child) for key, child in reversed(node.items()))
        elif isinstance(node, list):
            stack.extend((f"{path}[{index}]", child) for index, child in reversed(list(enumerate(node))))
    return None


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")
