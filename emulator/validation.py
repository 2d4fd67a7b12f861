"""Pydantic validation errors as `path: problem; fix` lines, one per problem: the one formatter that
links (net.spec), scenario files (scenario) and control messages (telemetry) share, so every edge
words its errors alike. Knows pydantic only, nothing of the project's models.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import UnionType
from typing import Annotated, Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel, ValidationError
from pydantic_core import PydanticCustomError


def format_validation_error(
    err: ValidationError,
    where: str,
    *,
    model: type[BaseModel],
    hints: Mapping[str, str] | None = None,
) -> str:
    """One line per problem: path, value, what is wrong and the fix.

    `model` is the model that was validated (so an unknown key lists its siblings and union tags
    drop out of paths); `hints` give fixes by document path or field name.
    """
    field_hints = hints or {}
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
