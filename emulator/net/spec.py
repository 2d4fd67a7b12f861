"""What a link should look like, per direction: the pydantic edge of every link change, plus the
validation-error formatter that the scenario schema shares.

Units carry their name (`bandwidth_mbit`, `delay_ms`); backends convert once with the `*_s` and
`rate_bytes_per_s` helpers. KV caches flow remote -> local, so that is the primary direction.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from types import UnionType
from typing import Annotated, Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator
from pydantic_core import PydanticCustomError

from emulator.errors import LinkSpecError

MAX_BANDWIDTH_MBIT = 100_000.0  # 100 Gbit/s: the paper's whole cross-cluster link
MAX_DELAY_MS = 10_000.0
MAX_QUEUE_PACKETS = 1_000_000


class LinkShape(BaseModel):
    """One direction of a link. `bandwidth_mbit=None` means unshaped (as fast as the backend goes)."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    bandwidth_mbit: float | None = Field(default=None, gt=0, le=MAX_BANDWIDTH_MBIT)
    delay_ms: float = Field(default=0.0, ge=0, le=MAX_DELAY_MS)
    jitter_ms: float = Field(default=0.0, ge=0, le=MAX_DELAY_MS)
    loss_pct: float = Field(default=0.0, ge=0, le=100)
    loss_correlation_pct: float = Field(default=0.0, ge=0, le=100)
    queue_packets: int = Field(default=1000, ge=1, le=MAX_QUEUE_PACKETS)

    @model_validator(mode="after")
    def _correlation_needs_loss(self) -> LinkShape:
        if self.loss_correlation_pct and not self.loss_pct:
            raise ValueError("loss_correlation_pct needs loss_pct > 0; set loss_pct or drop the correlation")
        return self

    @property
    def rate_bytes_per_s(self) -> float:
        return math.inf if self.bandwidth_mbit is None else self.bandwidth_mbit * 1e6 / 8

    @property
    def delay_s(self) -> float:
        return self.delay_ms / 1e3

    @property
    def jitter_s(self) -> float:
        return self.jitter_ms / 1e3


class LinkSpec(LinkShape):
    """The remote -> local direction; `reverse` overrides local -> remote (default: the same shape)."""

    reverse: LinkShape | None = None

    @property
    def to_local(self) -> LinkShape:
        return LinkShape(**self.model_dump(exclude={"reverse"}))

    @property
    def to_remote(self) -> LinkShape:
        return self.reverse if self.reverse is not None else self.to_local


def parse_link_spec(data: dict, where: str = "link") -> LinkSpec:
    """Validate `data`; raise LinkSpecError with one line per problem, each naming its field."""
    try:
        return LinkSpec.model_validate(data)
    except ValidationError as err:
        raise LinkSpecError(format_validation_error(err, where)) from None


FIELD_HINTS = {
    "bandwidth_mbit": f"use a rate in (0, {MAX_BANDWIDTH_MBIT:g}] Mbit/s, or null for an unshaped link",
    "delay_ms": f"use 0 for no added delay, at most {MAX_DELAY_MS:g}",
    "jitter_ms": f"use 0 for no jitter, at most {MAX_DELAY_MS:g}",
    "loss_pct": "use a percentage in [0, 100]",
    "loss_correlation_pct": "use a percentage in [0, 100]",
    "queue_packets": f"use a whole number of packets in [1, {MAX_QUEUE_PACKETS}]",
}


def format_validation_error(
    err: ValidationError,
    where: str,
    *,
    model: type[BaseModel] = LinkSpec,
    hints: Mapping[str, str] | None = None,
) -> str:
    """One line per problem: path, value, what is wrong and the fix.

    `model` is the model that was validated (so an unknown key lists its siblings and union tags
    drop out of paths); `hints` add fixes by document path or field name over FIELD_HINTS.
    """
    field_hints = {**FIELD_HINTS, **(hints or {})}
    lines = []
    for e in err.errors():
        if e["type"] == LINES_ERROR:  # a cross-field check already wrote `path: problem; fix` lines
            lines += [f"{where}.{line}" if where else line for line in e["msg"].splitlines()]
        else:
            lines.append(_line(e, where, model, field_hints))
    return "\n".join(lines)


def _line(e: Any, where: str, model: type[BaseModel], field_hints: Mapping[str, str]) -> str:
    doc_path, _ = _walk(model, e["loc"])
    path = ".".join(p for p in (where, *map(_show, doc_path)) if p) or model.__name__
    if e["type"] == FIELD_ERROR:  # a field validator wrote its own `problem; fix`, case kept
        return f"{path}: {e['msg']}"
    hint = _hint(field_hints, [str(p) for p in doc_path])
    if e["type"] == "extra_forbidden":
        _, container = _walk(model, e["loc"][:-1])
        known = ", ".join(container.model_fields) if container else "see the schema"
        return f"{path}: unknown field; remove it (known: {known})"
    if e["type"] == "missing":
        return f"{path}: missing; add it" + (f" ({hint})" if hint else "")
    what = e["msg"].removeprefix("Value error, ")
    if e["type"] == "value_error" and not hint:  # a validator wrote its own `problem; fix`
        return f"{path}: {what}"
    if e["type"] in ("literal_error", "enum"):  # the fix lists the choices; say it once
        what = "not one of the choices"
    value = e.get("input")
    shown = "" if isinstance(value, dict) else f" {_clip(repr(value))} is"  # a section: no repr
    fix = hint or _type_fix(e["type"], e.get("ctx") or {})
    return f"{path}:{shown} invalid ({what.lower()}); {fix}"


LINES_ERROR = "prfaas_lines"
FIELD_ERROR = "prfaas_field"  # PydanticCustomError(FIELD_ERROR, "{text}", {"text": "problem; fix"})


def lines_error(lines: list[str]) -> PydanticCustomError:
    """What a cross-field validator raises: finished `path: problem; fix` lines, printed as is."""
    return PydanticCustomError(LINES_ERROR, "{text}", {"text": "\n".join(lines)})


_TYPE_FIXES = {
    "greater_than": "use a value above {gt}",
    "greater_than_equal": "use a value of at least {ge}",
    "less_than": "use a value below {lt}",
    "less_than_equal": "use a value of at most {le}",
    "literal_error": "use one of {expected}",
    "enum": "use one of {expected}",
    "union_tag_invalid": "use one of {expected_tags}",
    "union_tag_not_found": "add {discriminator}",
    "too_short": "give at least {min_length}",
    "too_long": "give at most {max_length}",
    "string_pattern_mismatch": "use lowercase letters, digits and dashes",
    "bool_type": "use true or false",
    "finite_number": "use a finite number",
}


def _hint(field_hints: Mapping[str, str], doc_path: list[str]) -> str | None:
    """The hint for the longest dotted suffix of the path: `capacity_mib.remote`, then `remote`."""
    for start in range(len(doc_path)):
        if hint := field_hints.get(".".join(doc_path[start:])):
            return hint
    return None


def _type_fix(kind: str, ctx: dict) -> str:
    """A generic fix by error kind, for fields without a hint of their own."""
    if kind in _TYPE_FIXES:
        return _TYPE_FIXES[kind].format(**{k: ctx.get(k, "?") for k in ("gt", "ge", "lt", "le",
            "expected", "expected_tags", "discriminator", "min_length", "max_length")})
    if kind.startswith(("int_", "float_")):
        return "use a plain number"
    if kind in ("dict_type", "model_type", "model_attributes_type"):
        return "use a mapping of key: value"
    if kind in ("list_type", "tuple_type"):
        return "use a list"
    return "see `python -m emulator schema` for the accepted form"


def _clip(text: str, limit: int = 60) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _show(part: object) -> str:
    """A path element as it reads in the file; odd keys (newlines, huge) are quoted and clipped."""
    text = str(part)
    return text if text.isprintable() and len(text) <= 40 else _clip(repr(part), 40)


def _walk(model: type[BaseModel], loc: tuple) -> tuple[list, type[BaseModel] | None]:
    """Follow a pydantic error location through `model`'s annotations.

    Returns the document path (union tags and dict-key markers dropped: they are not keys in the
    file) and the model the location ends in (None where it ends in a scalar, list or dict).
    """
    path: list = []
    current: Any = model
    for part in loc:
        if part == "[key]":  # marks an error in the dict key just passed
            continue
        current, is_label = _step(_unwrap(current), part)
        if not is_label:
            path.append(part)
    current = _unwrap(current)
    return path, current if isinstance(current, type) and issubclass(current, BaseModel) else None


def _unwrap(tp: Any) -> Any:
    """Strip Annotated and Optional, which add no element to an error location."""
    while True:
        if get_origin(tp) is Annotated:
            tp = get_args(tp)[0]
            continue
        if get_origin(tp) in (Union, UnionType):
            members = [a for a in get_args(tp) if a is not type(None)]
            if len(members) == 1:
                tp = members[0]
                continue
        return tp


def _step(tp: Any, part: object) -> tuple[Any, bool]:
    """The annotation one location element further in, and whether the element was a label."""
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        field = tp.model_fields.get(str(part))
        return (field.annotation if field else None), False
    origin, args = get_origin(tp), get_args(tp)
    if origin in (Union, UnionType):  # a discriminated union: the element is the member's tag
        return next((m for m in map(_unwrap, args) if _has_tag(m, part)), None), True
    if origin is dict:
        return args[1], False
    if origin in (list, tuple) and args:
        return args[0], False
    return None, False


def _has_tag(member: Any, tag: object) -> bool:
    if not (isinstance(member, type) and issubclass(member, BaseModel)):
        return False
    literals = (_unwrap(f.annotation) for f in member.model_fields.values())
    return any(get_origin(lit) is Literal and tag in get_args(lit) for lit in literals)
