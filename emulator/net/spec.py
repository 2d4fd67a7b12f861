"""What a link should look like, per direction: the pydantic edge of every link change, with the
fixes its validation errors name (emulator.validation writes the lines).

Units carry their name (`bandwidth_mbit`, `delay_ms`); backends convert once with the `*_s` and
`rate_bytes_per_s` helpers. KV caches flow remote -> local, so that is the primary direction.
"""

from __future__ import annotations

import math

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from emulator.errors import LinkSpecError
from emulator.validation import format_validation_error

MAX_BANDWIDTH_MBIT = 400_000.0  # 400 Gbit/s: the top of the bandwidth sweeps (the paper's link is ~100)
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
        raise LinkSpecError(format_validation_error(err, where, model=LinkSpec, hints=FIELD_HINTS)) from None


FIELD_HINTS = {
    "bandwidth_mbit": f"use a rate in (0, {MAX_BANDWIDTH_MBIT:g}] Mbit/s, or null for an unshaped link",
    "delay_ms": f"use 0 for no added delay, at most {MAX_DELAY_MS:g}",
    "jitter_ms": f"use 0 for no jitter, at most {MAX_DELAY_MS:g}",
    "loss_pct": "use a percentage in [0, 100]",
    "loss_correlation_pct": "use a percentage in [0, 100]",
    "queue_packets": f"use a whole number of packets in [1, {MAX_QUEUE_PACKETS}]",
}
