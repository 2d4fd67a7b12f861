"""Paired roofline ratios: each model run against the GEMM rate measured right beside it."""

import statistics

import pytest
import torch

from model_stub.roofline import GemmReference, PairedRun, interleave


def test_each_run_is_divided_by_the_mean_of_the_gemm_samples_around_it():
    # 10 GFLOP per run; GEMM 100, 100, 50 (a slow moment), 100 GFLOP/s around three 0.2 s runs
    paired = PairedRun(model_s=[0.2, 0.2, 0.2], gemm_gflops=[100.0, 100.0, 50.0, 100.0])
    assert paired.ratios(10 * 10**9) == pytest.approx([50 / 100, 50 / 75, 50 / 75])


def test_one_slow_gemm_sample_cannot_decide_the_median():
    """A once-per-run GEMM that hit a slow moment (25 instead of 100) would report 4x the efficiency;
    paired, it moves only the two runs beside it, and the median of five stays at the true ratio."""
    gemm = [100.0, 100.0, 100.0, 100.0, 25.0, 100.0]
    ratios = PairedRun(model_s=[1.0] * 5, gemm_gflops=gemm).ratios(40 * 10**9)
    assert statistics.median(ratios) == pytest.approx(0.40)
    assert max(ratios) == pytest.approx(40 / 62.5)


@pytest.mark.parametrize(("model_s", "gemm"), [([], [1.0]), ([1.0], [1.0]), ([1.0], [1.0, 1.0, 1.0])])
def test_a_gemm_sample_must_stand_on_each_side_of_every_run(model_s, gemm):
    with pytest.raises(ValueError, match="GEMM samples around them"):
        PairedRun(model_s, gemm)


def test_interleave_times_every_run_between_two_real_gemm_samples():
    gemm = GemmReference(torch.device("cpu"), 64)
    calls = []
    paired = interleave(lambda: calls.append(len(calls)), gemm, repeats=3)
    assert calls == [0, 1, 2]
    assert len(paired.model_s) == 3 and len(paired.gemm_gflops) == 4
    assert all(s >= 0 for s in paired.model_s) and all(g > 0 for g in paired.gemm_gflops)
