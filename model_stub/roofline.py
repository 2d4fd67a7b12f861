"""The bench's roofline: a square GEMM timed right beside each model run, and the paired ratios.

A GEMM measured once per run lets one slow moment (another process on the cores, a frequency
dip) decide every efficiency figure. Here the GEMM is timed before and after each model run
(G, M, G, M, ..., G) and each run is divided by the mean of the two GEMM rates beside it; the
figure is the median of those paired ratios. This module times and pairs; it knows no model.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch

GEMM_BLOCK_MIN_S = 0.1  # one GEMM sample spans at least this long, so a single matmul's jitter averages out
GEMM_BLOCK_MIN_CALLS = 2


def timed(fn: Callable[[], object], device: torch.device) -> float:
    """Wall seconds of `fn()`, synchronised on CUDA so queued kernels are counted."""
    if device.type == "cuda":
        torch.cuda.synchronize()
    start = time.perf_counter()
    fn()
    if device.type == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter() - start


class GemmReference:
    """An n x n x n matmul in the model's dtype on the model's device; `sample()` is one GFLOP/s reading."""

    def __init__(self, device: torch.device, n: int, dtype: torch.dtype = torch.float32) -> None:
        self.device, self.n = device, n
        self.a, self.b = (torch.randn(n, n, device=device, dtype=dtype) for _ in range(2))
        for _ in range(3):  # warm-up: first calls pay for allocation and kernel selection
            self.a @ self.b

    def sample(self) -> float:
        """GFLOP/s over a block of back-to-back matmuls lasting at least GEMM_BLOCK_MIN_S."""
        calls, seconds = 0, 0.0
        while calls < GEMM_BLOCK_MIN_CALLS or seconds < GEMM_BLOCK_MIN_S:
            seconds += timed(lambda: self.a @ self.b, self.device)
            calls += 1
        return 2 * self.n**3 * calls / seconds / 1e9


@dataclass(frozen=True, slots=True)
class PairedRun:
    """Model runs interleaved with GEMM samples: gemm_gflops has one more entry than model_s."""

    model_s: list[float]
    gemm_gflops: list[float]

    def __post_init__(self) -> None:
        if not self.model_s or len(self.gemm_gflops) != len(self.model_s) + 1:
            raise ValueError(f"PairedRun: {len(self.model_s)} model runs need {len(self.model_s) + 1} "
                             f"GEMM samples around them, got {len(self.gemm_gflops)}")

    def ratios(self, flops: int) -> list[float]:
        """Each run's FLOP/s over the mean GEMM rate of the samples just before and after it."""
        return [flops / s / 1e9 / ((self.gemm_gflops[i] + self.gemm_gflops[i + 1]) / 2)
                for i, s in enumerate(self.model_s)]


def interleave(run_model: Callable[[], object], gemm: GemmReference, repeats: int) -> PairedRun:
    """G, M, G, M, ..., G: `repeats` timed model runs, each between two GEMM samples."""
    gemm_gflops, model_s = [gemm.sample()], []
    for _ in range(repeats):
        model_s.append(timed(run_model, gemm.device))
        gemm_gflops.append(gemm.sample())
    return PairedRun(model_s, gemm_gflops)


def summary(samples: list[float]) -> dict[str, float]:
    return {"median": statistics.median(samples), "min": min(samples), "max": max(samples)}
