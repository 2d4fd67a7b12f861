"""A worker's answer to `calibrate`: how long this process, on this machine right now, takes to
prefill prompts of given lengths and to take one decode step. The gateway turns the answers into
the capacity that `rate_per_s: auto` targets (emulator/live/calibration.py).

Runs on the torch thread like any forward pass; it ships nothing, stores nothing and ignores the
speed factor (the gateway divides by it).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Sequence

import torch

from model_stub.model import HybridModel

WARMUP_TOKENS = 64  # the first forward after loading allocates; it is not timed
CALIBRATION_SEED = 0


def calibrate(model: HybridModel, lengths: Sequence[int], decode_steps: int) -> tuple[list[float], float]:
    """(seconds of one prefill of each length, median seconds of one decode step on the first
    length's cache at batch 1). Tokens are seeded random bytes, as a prompt's would be."""
    vocab = min(model.config.vocab_size, 256)
    generator = torch.Generator().manual_seed(CALIBRATION_SEED)
    tokens = torch.randint(0, vocab, (max(*lengths, WARMUP_TOKENS),), generator=generator).tolist()
    model.prefill(tokens[:WARMUP_TOKENS])
    prefill_s, caches = [], []
    for length in lengths:
        start = time.perf_counter()
        logits, cache = model.prefill(tokens[:length])
        prefill_s.append(time.perf_counter() - start)
        caches.append((int(logits.argmax()), cache))
    token, cache = caches[0]
    steps = []
    for _ in range(decode_steps):
        start = time.perf_counter()
        token = int(model.decode_step([token], [cache])[0].argmax())
        steps.append(time.perf_counter() - start)
    return prefill_s, statistics.median(steps)
