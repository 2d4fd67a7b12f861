"""The paper's case study (../shared/paper-model.md, Section 4) as throughput-model inputs, for tests
that must not depend on the scenario parser; tests/emulator/test_analytic.py checks that
scenarios/paper-case-study.yaml converts to the same numbers."""

from __future__ import annotations

import dataclasses

from emulator.control.profiles import LengthSamples, PiecewiseLinear
from emulator.control.throughput_model import ModelInputs

K = 1024
LENGTHS_K = (1 * K, 8 * K, 32 * K, 128 * K)
KV_MIB = (190.8, 308.9, 701.3, 2316.3)
PREFILL_H200_S = (0.44, 0.72, 1.84, 7.40)
PREFILL_H20_S = (1.00, 1.543, 5.017, 21.0)


def paper_inputs(**changes: object) -> ModelInputs:
    """Section 4 with this project's H20 calibration; `changes` replace fields (e.g. the link)."""
    inputs = ModelInputs(
        kv_bytes=PiecewiseLinear(LENGTHS_K, tuple(m * 2**20 for m in KV_MIB)),
        prefill_remote_s=PiecewiseLinear(LENGTHS_K, PREFILL_H200_S),
        prefill_local_s=PiecewiseLinear(LENGTHS_K, PREFILL_H20_S),
        decode_step_s=0.025, max_decode_batch=20, output_len=1024,
        num_prfaas=4, num_local=8, num_baseline=12, egress_bytes_per_s=12.5e9,
        lengths=LengthSamples.truncated_lognormal(9.90, 1.00, 128, 131072),
    )
    return dataclasses.replace(inputs, **changes)
