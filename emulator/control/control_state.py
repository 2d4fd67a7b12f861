"""The operator's mutable control state of one run: routing settings, the scheduler's loops and the
local split target. ONE object owns them; the router reads it, the scheduler writes the threshold
it chooses, and the knobs (emulator.knobs) write the rest. Pure: no I/O, no clock.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from emulator.control.types import Affinity, PrefixRule, RoutePolicy

UNREACHABLE_TOKENS = 2**31  # t when the optimizer sends nothing remote (its t is infinite)


@dataclass(frozen=True, slots=True)
class RouterConfig:
    """The routing settings a decision was made under (RouteWhy keeps the one it used)."""

    policy: RoutePolicy
    threshold_tokens: int
    prefix_rule: PrefixRule
    affinity: Affinity

    def __post_init__(self) -> None:
        if self.threshold_tokens < 0:
            raise ValueError(
                f"router.threshold_tokens: {self.threshold_tokens} is negative; "
                "use 0 or more tokens"
            )


def whole_threshold(t: float) -> int:
    """A model's t as the router's whole tokens (an infinite t routes nothing remote)."""
    return int(t) if math.isfinite(t) else UNREACHABLE_TOKENS


class ControlState:
    """What an operator or the scheduler may change while a run goes on.

    `router` is replaced, never mutated, so a decision that holds it keeps the settings it was made
    under, and the router reads one attribute per request. `auto_threshold` is the optimizer's t
    for this run: a knob set to `auto` returns to it on every engine.
    """

    __slots__ = ("router", "auto_threshold", "short_term_enabled", "long_term_enabled", "split_target")

    def __init__(self, router: RouterConfig, *, auto_threshold: int | None = None,
                 short_term_enabled: bool = False, long_term_enabled: bool = False) -> None:
        self.router = router
        self.auto_threshold = router.threshold_tokens if auto_threshold is None else auto_threshold
        self.short_term_enabled = short_term_enabled
        self.long_term_enabled = long_term_enabled
        self.split_target: int | None = None  # local prefill instances an operator asked for

    @property
    def threshold_tokens(self) -> int:
        return self.router.threshold_tokens

    def set_threshold(self, threshold_tokens: int) -> None:
        self.router = replace(self.router, threshold_tokens=threshold_tokens)

    def set_policy(self, policy: RoutePolicy) -> None:
        self.router = replace(self.router, policy=policy)

    def set_prefix_rule(self, prefix_rule: PrefixRule) -> None:
        self.router = replace(self.router, prefix_rule=prefix_rule)

    def set_affinity(self, affinity: Affinity) -> None:
        self.router = replace(self.router, affinity=affinity)

    def set_loops(self, short_term: bool | None = None, long_term: bool | None = None) -> None:
        """Turn either scheduler loop on or off; None leaves it as it is."""
        if short_term is not None:
            self.short_term_enabled = short_term
        if long_term is not None:
            self.long_term_enabled = long_term

    @property
    def is_scheduling(self) -> bool:
        return self.short_term_enabled or self.long_term_enabled

    def set_split_target(self, num_prefill: int) -> None:
        self.split_target = num_prefill
