"""Chained block hashes and deterministic prompt tokens for the byte-level model (vocab 256).

A full block's tokens depend only on (seed, its chained hash), so requests whose chained hashes
agree share real token prefixes, and prefix caching works on real tokens. Python's salted hash()
is never used: every value here is stable across processes and machines.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Sequence

import numpy as np

from emulator.control.types import RequestSpec
from emulator.errors import ScenarioError

HASH_BITS = 63
HASH_MASK = (1 << HASH_BITS) - 1
VOCAB_SIZE = 256  # one token per byte: shake_128 output is already a token stream
_LOW_64 = (1 << 64) - 1
# _pack of two ints as one struct call: each 16-byte little-endian signed value is its low 64 bits
# (unsigned) then the rest (signed); struct.error means a value does not fit in 128 bits.
_PAIR = struct.Struct("<QqQq")
# blake2b keyed with the block personalisation once; a copy per hash skips re-parsing parameters.
_BLOCK_HASHER = hashlib.blake2b(digest_size=8, person=b"prfaas-block")


def _pack(*values: int) -> bytes:
    """Fixed-width encoding, so distinct tuples never encode alike; ints must fit in 128 bits."""
    return b"".join(v.to_bytes(16, "little", signed=True) for v in values)


def stable_hash(*values: int) -> int:
    """A 63-bit hash of integers, the same in every process (blake2b, not hash())."""
    digest = hashlib.blake2b(_pack(*values), digest_size=8, person=b"prfaas-block").digest()
    return int.from_bytes(digest, "little") & HASH_MASK


def text_hash(text: str) -> int:
    """A 63-bit stable hash of a string (a request id), for roots of request-unique chains."""
    digest = hashlib.blake2b(text.encode(), digest_size=8, person=b"prfaas-text").digest()
    return int.from_bytes(digest, "little") & HASH_MASK


def chain_hashes(ids: Sequence[int], root: int = 0) -> tuple[int, ...]:
    """Block i's hash = stable_hash(hash of block i-1, ids[i]), starting from `root`.

    Equal results at position i therefore mean equal ids at positions 0..i (and equal roots).
    The loop is stable_hash(previous, id) spelled out (the same bytes into the same blake2b),
    about 3x faster: building a long trace's requests is mostly this loop.
    """
    chained = []
    previous = root
    pack, new_hasher, from_bytes = _PAIR.pack, _BLOCK_HASHER.copy, int.from_bytes
    for block_id in ids:
        block_id = int(block_id)
        try:
            data = pack(previous & _LOW_64, previous >> 64, block_id & _LOW_64, block_id >> 64)
        except struct.error:
            data = _pack(previous, block_id)  # raises OverflowError beyond 128 bits, as stable_hash
        hasher = new_hasher()
        hasher.update(data)
        previous = from_bytes(hasher.digest(), "little") & HASH_MASK
        chained.append(previous)
    return tuple(chained)


def block_tokens_for(block_hash: int, block_tokens: int, seed: int) -> np.ndarray:
    """The tokens of one full block: a function of (seed, its chained hash) only."""
    stream = hashlib.shake_128(b"block" + _pack(seed, block_hash)).digest(block_tokens)
    return np.frombuffer(stream, dtype=np.uint8)


def synthesize_tokens(request: RequestSpec, block_tokens: int, seed: int) -> np.ndarray:
    """The request's prompt as uint8 token ids, length input_len.

    Blocks covered by `block_hashes` come from their hashes; the rest (partial tail, and any full
    blocks a trace gave no ids for) come from (seed, request id), so it is unique to the request.
    """
    if block_tokens < 1:
        raise ScenarioError(f"block_tokens: {block_tokens} must be >= 1; use the cache's block")
    hashed_len = len(request.block_hashes) * block_tokens
    if hashed_len > request.input_len:
        raise ScenarioError(
            f"request {request.id}: {len(request.block_hashes)} block hashes of {block_tokens} "
            f"tokens exceed input_len {request.input_len}; use the block_tokens of the hashes"
        )
    parts = [block_tokens_for(h, block_tokens, seed) for h in request.block_hashes]
    tail_len = request.input_len - hashed_len
    if tail_len:
        key = b"tail" + _pack(seed) + request.id.encode()
        parts.append(np.frombuffer(hashlib.shake_128(key).digest(tail_len), dtype=np.uint8))
    return np.concatenate(parts) if parts else np.empty(0, dtype=np.uint8)
