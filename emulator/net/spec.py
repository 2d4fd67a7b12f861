"""What a link should look like, per direction: the pydantic edge of every link change, with the
fixes its validation errors name (emulator.validation writes the lines).

Units carry their name (`bandwidth_mbit`, `delay_ms`); backends convert once with the `*_s` and
`rate_bytes_per_s` helpers. KV caches flow remote -> local, so that is the primary direction.
"""

from __future__ import annotations

import math
from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError, model_validator
from pydantic_core import PydanticCustomError

from emulator.errors import LinkSpecError
from emulator.validation import FIELD_ERROR, format_validation_error

# Physical bounds (issue 25), which the knob registry (emulator.knobs) quotes for every source.
# 1 kbit/s is the slowest rate worth shaping (a 1 MiB KV cache takes 2.3 hours; below it a byte count
# divides into centuries, and at 1e-310 into infinity). No bandwidth at all is a cut link: loss_pct
# 100, which both engines model (the virtual transfers wait; the live packets are dropped).
MIN_BANDWIDTH_MBIT = 0.001
MAX_BANDWIDTH_MBIT = 400_000.0  # 400 Gbit/s: the top of the bandwidth sweeps (the paper's link is ~100)
# A delay or jitter is 0 (none added) or at least 1 microsecond, the finest step tc's netem and the
# userspace relay apply; -0 is read as 0.
MIN_DELAY_MS = 0.001
MAX_DELAY_MS = 10_000.0
MAX_QUEUE_PACKETS = 1_000_000
BANDWIDTH_FIX = (f"use a rate in [{MIN_BANDWIDTH_MBIT:g}, {MAX_BANDWIDTH_MBIT:g}] Mbit/s, null for an unshaped "
                 "link, or loss_pct: 100 to cut it")


def _zero_or_at_least(floor: float, unit: str, fix: str) -> AfterValidator:
    """0 (also -0, read as 0) or a value of at least `floor`: below it the number means nothing."""

    def check(value: float) -> float:
        if value == 0:
            return 0.0
        if value < floor:
            raise PydanticCustomError(FIELD_ERROR, "{text}", {"text": f"{value!r} is below {floor:g} {unit}; {fix}"})
        return value

    return AfterValidator(check)


DELAY_FIX = f"use 0 for no added delay, or from {MIN_DELAY_MS:g} to {MAX_DELAY_MS:g}"
JITTER_FIX = f"use 0 for no jitter, or from {MIN_DELAY_MS:g} to {MAX_DELAY_MS:g}"
# The link's fields as types, so the scenario's LinkSpec and the control message's LinkControl
# enforce the same bounds.
BandwidthMbit = Annotated[float, Field(ge=MIN_BANDWIDTH_MBIT, le=MAX_BANDWIDTH_MBIT, description=BANDWIDTH_FIX)]
DelayMs = Annotated[float, Field(ge=0, le=MAX_DELAY_MS, description=DELAY_FIX),
                    _zero_or_at_least(MIN_DELAY_MS, "ms", DELAY_FIX)]
JitterMs = Annotated[float, Field(ge=0, le=MAX_DELAY_MS, description=JITTER_FIX),
                     _zero_or_at_least(MIN_DELAY_MS, "ms", JITTER_FIX)]
Percent = Annotated[float, Field(ge=0, le=100)]


class LinkShape(BaseModel):
    """One direction of a link. `bandwidth_mbit=None` means unshaped (as fast as the backend goes);
    `loss_pct=100` means cut (`is_cut`)."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    bandwidth_mbit: BandwidthMbit | None = None
    delay_ms: DelayMs = 0.0
    jitter_ms: JitterMs = 0.0
    loss_pct: Percent = 0.0  # 100 cuts the link
    loss_correlation_pct: Percent = 0.0
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
    def is_cut(self) -> bool:
        """Every packet is lost: nothing crosses until the link changes."""
        return self.loss_pct >= 100

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
        raise LinkSpecError(format_validation_error(err, where, model=LinkSpec, hints=FIELD_HINTS)) from None


FIELD_HINTS = {
    "bandwidth_mbit": BANDWIDTH_FIX,
    "delay_ms": DELAY_FIX,
    "jitter_ms": JITTER_FIX,
    "loss_pct": "use a percentage in [0, 100] (100 cuts the link)",
    "loss_correlation_pct": "use a percentage in [0, 100]",
    "queue_packets": f"use a whole number of packets in [1, {MAX_QUEUE_PACKETS}]",
}
