"""JSON from outside (an MQTT payload), decoded only once it is known to be small and shallow.

CPython's decoder recurses once per nesting level, so a few KB of `[[[[...` raise RecursionError
out of `json.loads`; the size is checked before any decoding and the depth by a linear scan of the
text, so nothing but a one-line TelemetryError leaves `loads_bounded`. Schemas live elsewhere.
"""

from __future__ import annotations

import json
from typing import Any

from emulator.errors import TelemetryError


def loads_bounded(payload: bytes, where: str, *, max_bytes: int, max_depth: int, fix: str) -> Any:
    """Decode UTF-8 JSON of at most `max_bytes` bytes and `max_depth` nested arrays/objects.

    Refuses NaN and Infinity (not JSON). Errors read `<where>: <problem>; <fix>`.
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
    try:
        return json.loads(text, parse_constant=_refuse_constant)
    except RecursionError:  # only if the scan above missed a level; never let it out
        raise TelemetryError(f"{where}: payload nests too deep; {fix}") from None
    except ValueError as err:
        raise TelemetryError(f"{where}: payload is not JSON ({str(err)[:80]}); {fix}") from None


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


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")
