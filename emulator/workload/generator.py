"""Synthetic workloads: arrivals + lengths (+ optional shared prefixes) -> sorted RequestSpecs.

Deterministic given the seed: each ingredient draws from its own child stream of the seed, so
changing, say, the output lengths leaves the arrival times alone. Trace replay is in traces.py.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from emulator.control.types import RequestSpec
from emulator.errors import ScenarioError
from emulator.workload.arrivals import (
    MAX_ARRIVALS,
    ArrivalSpec,
    Burst,
    RateChange,
    arrival_times,
    burst,
)
from emulator.workload.lengths import LengthDist
from emulator.workload.tokens import HASH_MASK, chain_hashes

MAX_PREFIXES = 1_000_000
MAX_SHARED_BLOCKS = 100_000


def _check_count(field: str, value: object, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ScenarioError(f"{field}: {value!r} must be a whole number in {low}..{high}")
    return value


@dataclass(frozen=True, slots=True)
class PrefixSharing:
    """Each request whose input has at least shared_blocks full blocks starts with one of
    num_prefixes shared prefixes (picked uniformly) of that many blocks, like a system prompt."""

    num_prefixes: int
    shared_blocks: int

    def __post_init__(self) -> None:
        _check_count("prefix_sharing.num_prefixes", self.num_prefixes, 1, MAX_PREFIXES)
        _check_count("prefix_sharing.shared_blocks", self.shared_blocks, 1, MAX_SHARED_BLOCKS)


def generate_requests(
    arrival: ArrivalSpec,
    input_len: LengthDist,
    output_len: LengthDist,
    duration_s: float,
    seed: int,
    max_requests: int,
    block_tokens: int = 512,
    prefix_sharing: PrefixSharing | None = None,
    rate_changes: Sequence[RateChange] = (),
    bursts: Sequence[Burst] = (),
) -> list[RequestSpec]:
    """Requests `rq-000001`... sorted by arrival in [0, duration_s), at most max_requests.

    Timeline bursts add their arrivals to the process's; the cap keeps the earliest requests.
    """
    _check_count("seed", seed, 0, 2**63 - 1)
    _check_count("max_requests", max_requests, 1, MAX_ARRIVALS)
    _check_count("block_tokens", block_tokens, 1, 1 << 24)
    arrival_rng, input_rng, output_rng, prefix_rng, block_rng = (
        np.random.default_rng(child) for child in np.random.SeedSequence(seed).spawn(5)
    )
    times = _merged_times(arrival, duration_s, arrival_rng, rate_changes, bursts, max_requests)
    num_requests = len(times)
    input_lens = input_len.sample(num_requests, input_rng)
    output_lens = output_len.sample(num_requests, output_rng)
    hashes = _block_hashes(input_lens // block_tokens, prefix_sharing, prefix_rng, block_rng)
    return [
        RequestSpec(
            id=f"rq-{i + 1:06d}",
            arrival_s=float(times[i]),
            input_len=int(input_lens[i]),
            output_len=int(output_lens[i]),
            block_hashes=hashes[i],
        )
        for i in range(num_requests)
    ]


def _merged_times(
    arrival: ArrivalSpec,
    duration_s: float,
    rng: np.random.Generator,
    rate_changes: Sequence[RateChange],
    bursts: Sequence[Burst],
    max_requests: int,
) -> np.ndarray:
    """The process's arrivals and the bursts', merged in time order and capped."""
    parts = [arrival_times(arrival, duration_s, rng, rate_changes, max_count=max_requests)]
    for event in bursts:
        if event.at_s + event.over_s > duration_s:
            raise ScenarioError(
                f"burst at_s {event.at_s} over_s {event.over_s}: ends past duration_s "
                f"{duration_s}; move it earlier or lengthen duration_s"
            )
        parts.append(burst(event.at_s, event.requests, event.over_s))
    return np.sort(np.concatenate(parts), kind="stable")[:max_requests]


def _block_hashes(
    num_full_blocks: np.ndarray,
    sharing: PrefixSharing | None,
    prefix_rng: np.random.Generator,
    block_rng: np.random.Generator,
) -> list[tuple[int, ...]]:
    """Chained hashes per request: a shared prefix where one applies, then unique blocks.

    Unique blocks get random 63-bit ids, so two requests agree on a hash only through a shared
    prefix (a collision needs equal parents and equal ids: about 2^-63 per block pair).
    """
    prefixes: list[tuple[int, ...]] = []
    choices = np.zeros(len(num_full_blocks), dtype=np.int64)
    if sharing is not None:
        shape = (sharing.num_prefixes, sharing.shared_blocks)
        prefix_ids = prefix_rng.integers(0, HASH_MASK, size=shape, endpoint=True)
        prefixes = [chain_hashes(row.tolist()) for row in prefix_ids]
        choices = prefix_rng.integers(0, sharing.num_prefixes, size=len(num_full_blocks))
    result = []
    for num_blocks, choice in zip(num_full_blocks.tolist(), choices.tolist(), strict=True):
        head: tuple[int, ...] = ()
        if sharing is not None and num_blocks >= sharing.shared_blocks:
            head = prefixes[choice]
        ids = block_rng.integers(0, HASH_MASK, size=num_blocks - len(head), endpoint=True)
        result.append(head + chain_hashes(ids.tolist(), root=head[-1] if head else 0))
    return result
