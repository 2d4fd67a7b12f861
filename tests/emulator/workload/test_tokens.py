"""Chained block hashes and synthesized prompts: shared hashes share real token prefixes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from emulator.control.types import RequestSpec
from emulator.errors import ScenarioError
from emulator.workload.tokens import chain_hashes, synthesize_tokens

ROOT = Path(__file__).resolve().parents[3]
BLOCK = 16


def request(rid: str, input_len: int, ids: list[int]) -> RequestSpec:
    return RequestSpec(rid, 0.0, input_len, 1, chain_hashes(ids))


def test_chained_hashes_agree_exactly_through_the_shared_prefix() -> None:
    a, b = chain_hashes([5, 6, 7, 8]), chain_hashes([5, 6, 9, 8])
    assert a[:2] == b[:2]
    assert a[2] != b[2] and a[3] != b[3]  # block 3's id matches, its prefix does not
    assert all(0 <= h < 2**63 for h in a + b)
    assert len(set(a)) == 4
    assert chain_hashes([1, 2], root=1) != chain_hashes([1, 2])
    assert chain_hashes([]) == ()


@pytest.mark.live
def test_hashes_are_stable_across_processes() -> None:
    """No salted hash(): other PYTHONHASHSEEDs give the same chain."""
    script = "from emulator.workload.tokens import chain_hashes; print(chain_hashes([1, 2, 3]))"
    outputs = set()
    for hash_seed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": hash_seed}
        result = subprocess.run(
            [sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True
        )
        outputs.add(result.stdout.strip())
    assert outputs == {str(chain_hashes([1, 2, 3]))}


def test_tokens_have_the_input_length_and_byte_vocabulary() -> None:
    tokens = synthesize_tokens(request("r1", 3 * BLOCK + 5, [1, 2, 3]), BLOCK, seed=0)
    assert tokens.dtype == np.uint8 and len(tokens) == 3 * BLOCK + 5
    assert len(set(tokens.tolist())) > 20  # looks like text, not a constant fill


def test_shared_hashes_give_shared_token_prefixes_and_nothing_more() -> None:
    first = synthesize_tokens(request("r1", 4 * BLOCK + 3, [1, 2, 3, 4]), BLOCK, seed=0)
    second = synthesize_tokens(request("r2", 4 * BLOCK + 3, [1, 2, 9, 4]), BLOCK, seed=0)
    np.testing.assert_array_equal(first[: 2 * BLOCK], second[: 2 * BLOCK])
    for block in (2, 3):
        span = slice(block * BLOCK, (block + 1) * BLOCK)
        assert not np.array_equal(first[span], second[span])
    assert not np.array_equal(first[4 * BLOCK :], second[4 * BLOCK :])  # tails are per request


def test_same_hashes_different_ids_differ_only_in_the_tail() -> None:
    first = synthesize_tokens(request("r1", 2 * BLOCK + 8, [1, 2]), BLOCK, seed=0)
    second = synthesize_tokens(request("r2", 2 * BLOCK + 8, [1, 2]), BLOCK, seed=0)
    np.testing.assert_array_equal(first[: 2 * BLOCK], second[: 2 * BLOCK])
    assert not np.array_equal(first[2 * BLOCK :], second[2 * BLOCK :])


def test_blocks_without_hashes_are_tail_and_short_prompts_work() -> None:
    """A trace may give fewer ids than full blocks; the remainder is request-unique."""
    partial = synthesize_tokens(request("r1", 3 * BLOCK, [1]), BLOCK, seed=0)
    full = synthesize_tokens(request("r1", 3 * BLOCK, [1, 2, 3]), BLOCK, seed=0)
    np.testing.assert_array_equal(partial[:BLOCK], full[:BLOCK])
    assert len(synthesize_tokens(request("r3", 5, []), BLOCK, seed=0)) == 5


def test_same_seed_same_tokens_different_seed_different() -> None:
    spec = request("r1", 2 * BLOCK + 3, [1, 2])
    first = synthesize_tokens(spec, BLOCK, seed=7)
    np.testing.assert_array_equal(first, synthesize_tokens(spec, BLOCK, seed=7))
    other = synthesize_tokens(spec, BLOCK, seed=8)
    assert not np.array_equal(first[:BLOCK], other[:BLOCK])


def test_more_hashes_than_full_blocks_is_refused() -> None:
    with pytest.raises(ScenarioError, match="exceed input_len"):
        synthesize_tokens(request("r1", BLOCK + 1, [1, 2]), BLOCK, seed=0)
