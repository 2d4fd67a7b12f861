"""One-line refusals of payloads from outside (MQTT messages, control knobs): each problem named
with its field and a clipped value, so a hostile payload cannot flood a log line or a screen."""

from __future__ import annotations

import json
import math

from pydantic import ValidationError

from emulator.errors import TelemetryError

MAX_SHOWN_PROBLEMS = 3  # an error line names at most this many problems, then counts the rest
MAX_SHOWN_CHARS = 60  # a value or name from outside is clipped to this in an error line
MAX_ERROR_CHARS = 400  # a whole error line, however many problems it names


def one_line(err: ValidationError) -> str:
    """Each problem as `field = value: what is wrong`, joined with '; '; values and names from
    outside are clipped and at most MAX_SHOWN_PROBLEMS are named, so the line stays short."""
    parts = []
    errors = err.errors(include_url=False)
    for e in errors[:MAX_SHOWN_PROBLEMS]:
        field = clip(".".join(str(p) for p in e["loc"])) or "payload"
        if e["type"] == "extra_forbidden":
            parts.append(f"{field} is not a known field; remove it")
        elif e["type"] == "missing":
            parts.append(f"{field} is missing")
        elif not e["loc"]:
            parts.append(f"payload {e['msg'].removeprefix('Value error, ')}")
        else:
            parts.append(f"{field} = {clip(shown(e.get('input')))} is invalid "
                         f"({clip(e['msg'].lower(), 2 * MAX_SHOWN_CHARS)})")
    if len(errors) > MAX_SHOWN_PROBLEMS:
        parts.append(f"and {len(errors) - MAX_SHOWN_PROBLEMS} more problems")
    return "; ".join(parts)


def shown(value: object) -> str:
    """A refused value as JSON; a huge int is summarised, never converted to 4,000 digits."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > 10**18:
        return f"<a number of about {int(value.bit_length() * math.log10(2)) + 1} digits>"
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return json.dumps(value, default=str)


def refusal(line: str) -> TelemetryError:
    """A refused control message: one line of at most MAX_ERROR_CHARS, however many problems."""
    return TelemetryError(clip(line, MAX_ERROR_CHARS))


def clip(text: str, limit: int = MAX_SHOWN_CHARS) -> str:
    text = text if text.isprintable() else repr(text)[1:-1]
    return text if len(text) <= limit else text[: limit - 3] + "..."
