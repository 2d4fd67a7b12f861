"""bench/gpu_check.sh in CI's quick CPU form: every step runs and passes, and its one table and its
JSON carry the figures a GPU run reports (device, GEMM rate, prefill efficiency, decode tokens/s,
live TTFT, copy/compute overlap); the live run's placement on one and on three GPUs."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.bench.scripts import BENCH, load_bench

gpu_check = load_bench("gpu_check")


@pytest.mark.live
def test_the_quick_cpu_form_runs_every_step_and_reports_its_figures(tmp_path: Path) -> None:
    out = tmp_path / "gpu_check.json"
    done = subprocess.run(["bash", str(BENCH / "gpu_check.sh"), "--device", "cpu", "--quick", "--out", str(out)],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    result = json.loads(out.read_text())
    steps = result["steps"]
    assert set(steps) == {"tests", "model_bench", "overlap", "live", "netem"}
    assert all(step["ok"] for step in steps.values()), steps
    assert "skipped" in steps["tests"]["summary"] or "passed" in steps["tests"]["summary"]
    bench = steps["model_bench"]["figures"]
    assert bench["gemm_tflops"] > 0 and bench["dtype"] == "float32"
    assert 0 < bench["prefill_efficiency"]["kimi-linear-mini"] and set(bench["decode_tokens_per_s"]) == {"1", "8"}
    assert 0.0 <= steps["overlap"]["overlap"] <= 1.0 and steps["overlap"]["kv_bytes"] > 0
    live = steps["live"]["figures"]
    assert live["failed_count"] == 0 and live["completed"] > 0 and 0 < live["ttft_p50_s"] <= live["ttft_p90_s"]
    assert result["within_limit"] and result["seconds"] <= gpu_check.MAX_TOTAL_S
    table = done.stdout.splitlines()
    for row in ("device", "GEMM TFLOP/s", "prefill efficiency", "decode tok/s", "live TTFT P50/P90 (s)",
                "copy/compute overlap", "gpu tests", "netem", "steps"):
        assert any(line.startswith(row) for line in table), (row, table)
    assert any(line.startswith("steps") and "all passed" in line for line in table)


def test_live_workers_go_on_the_gpus_there_are() -> None:
    assert gpu_check.live_overrides("cpu", 0, quick=False) == []
    one = gpu_check.live_overrides("cuda", 1, quick=False)
    assert one == ["clusters.remote.device=cuda", "clusters.remote.devices=[0]"]  # local stays on CPU
    three = gpu_check.live_overrides("cuda", 3, quick=True)
    assert three[:2] == ["model.size=tiny", "duration_s=10"]
    assert "clusters.local.devices=[1, 2]" in three and "clusters.remote.devices=[0]" in three


@pytest.mark.live
def test_cuda_without_a_gpu_is_refused_in_one_line(capsys) -> None:
    if gpu_check_has_cuda():
        return  # the refusal is for machines without one
    assert gpu_check.main(["--device", "cuda"]) == 2
    assert "no CUDA device is visible" in capsys.readouterr().err


def gpu_check_has_cuda() -> bool:
    import torch

    return torch.cuda.is_available()
