"""An axis's levels: the listed values, a range's steps or a log range's points, and the pickers
that map a uniform draw in [0, 1] to a level (random and Latin-hypercube sampling)."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from emulator.sweep.spec import Axis

Value = int | float | str | bool


def num_axis_levels(axis: Axis) -> int:
    """An axis's grid levels, counted without listing them."""
    if axis.values is not None:
        return len(axis.values)
    if axis.range is not None:
        r = axis.range
        return 1 + int(math.floor((r.stop - r.start) / (r.step or 1.0) + 1e-9))
    assert axis.log_range is not None
    return axis.log_range.num or 0


def axis_levels(axis: Axis) -> list[Value]:
    """An axis's grid levels; a range written in integers gives integers, floats are rounded to 12
    significant digits so 0.1 + 0.2 reads 0.3."""
    if axis.values is not None:
        return list(axis.values)
    num = num_axis_levels(axis)
    pick = picker(axis)
    return [pick(i / (num - 1) if num > 1 else 0.0) for i in range(num)] if axis.log_range else \
        [_number(axis.range.start + i * (axis.range.step or 0.0), _is_int_range(axis)) for i in range(num)]


def picker(axis: Axis) -> Callable[[float], Value]:
    """u in [0, 1] -> a level: a listed value (by stratum), a point of the range, or of the log range."""
    if axis.values is not None:
        values = axis.values
        return lambda u: values[min(int(u * len(values)), len(values) - 1)]
    if axis.range is not None:
        r, is_int = axis.range, _is_int_range(axis)
        return lambda u: _number(r.start + u * (r.stop - r.start), is_int)
    lr = axis.log_range
    assert lr is not None
    is_int = isinstance(lr.start, int) and isinstance(lr.stop, int)
    low, high = math.log(lr.start), math.log(lr.stop)
    return lambda u: _number(math.exp(low + u * (high - low)), is_int)


def _is_int_range(axis: Axis) -> bool:
    r = axis.range
    assert r is not None
    return all(isinstance(x, int) for x in (r.start, r.stop, r.step or 1))


def _number(x: float, is_int: bool) -> Any:
    return int(round(x)) if is_int else float(f"{x:.12g}")
