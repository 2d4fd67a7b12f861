"""Issue 14's acceptance for the typed vocabulary: live-worker-crash on both engines files its
failures under the one FailReason enum, and `python -m emulator compare` lines them up by reason.

Real runs through the command line. The scenario's own settings lose no request (the killed
worker's request is retried locally), so the overrides leave nowhere to retry: every prompt goes
remote and the local cluster only decodes, and while remote-prefill-0 is down requests fail with
`no_prefill_node` on both engines.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from emulator.control.types import FailReason, RequestStatus

ROOT = Path(__file__).resolve().parents[2]
SCENARIO = ROOT / "scenarios" / "live-worker-crash.yaml"
OVERRIDES = ("router.policy=all-remote", "clusters.local.prefill_instances=0", "duration_s=30",
             "model.size=tiny")
TAGS = {r.value for r in FailReason}

pytestmark = [pytest.mark.root, pytest.mark.slow,
              pytest.mark.skipif(os.geteuid() != 0, reason="needs root: namespaces and TUN need CAP_NET_ADMIN")]


def emulator(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "emulator", *map(str, args)], cwd=ROOT, text=True,
                          capture_output=True, timeout=280)


def record(run: Path) -> tuple[dict, pd.DataFrame]:
    return json.loads((run / "summary.json").read_text()), pd.read_parquet(run / "requests.parquet")


def test_live_and_virtual_worker_crash_line_up_by_fail_reason(tmp_path: Path) -> None:
    sets = [arg for item in OVERRIDES for arg in ("--set", item)]
    for engine in ("live", "virtual"):
        done = emulator("run", SCENARIO, "--engine", engine, "--out", tmp_path / engine, *sets)
        assert done.returncode in (0, 1), done.stderr[-2000:]  # 1: the scenario's expect: failed, as meant
    docs = {}
    for engine in ("live", "virtual"):
        doc, requests = record(tmp_path / engine)
        docs[engine] = doc
        failed = requests[requests["status"] == RequestStatus.FAILED.value]
        assert set(requests["status"]) <= {s.value for s in RequestStatus}
        assert len(failed) > 0 and set(failed["fail_reason"]) <= TAGS, failed["fail_reason"].tolist()
        assert failed["fail_detail"].str.len().gt(0).all()  # the words stay, beside the tag
        by_reason = doc["summary"]["failed_by_reason"]
        assert sum(by_reason.values()) == len(failed) and set(by_reason) <= TAGS
        assert by_reason.get(FailReason.NO_PREFILL_NODE.value, 0) > 0, by_reason
        assert doc["meta"]["engine"] == engine
    assert docs["live"]["meta"].keys() == docs["virtual"]["meta"].keys()  # one RunMeta on both

    shown = emulator("compare", tmp_path / "live", tmp_path / "virtual", "--out", tmp_path / "compare.html")
    assert shown.returncode == 0, shown.stderr
    print(shown.stdout)  # the real table, for the record (-s shows it)
    rows = {line.split()[0]: line.split()[1:] for line in shown.stdout.splitlines()
            if line.strip() and line.split()[0] in TAGS}
    by_engine = [docs[e]["summary"]["failed_by_reason"] for e in ("live", "virtual")]
    for reason in set(by_engine[0]) | set(by_engine[1]):
        counts = [counts_of.get(reason, 0) for counts_of in by_engine]
        assert rows[reason][:2] == [str(c) for c in counts]
