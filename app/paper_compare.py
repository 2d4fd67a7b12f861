"""The paper beside the project: tables of a published figure, the project's figure and their
difference, for the case study (from the optimizer or a recorded run) and for Phi_kv.

Pure pandas over `app.paper_figures`; cells are display strings ("-" where a side has no figure),
so every page shows them alike. Rendering is `app.paper_view`'s.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from app.kv_view import phi_kv_gbps
from app.paper_figures import (
    CASE_STUDY,
    CASE_STUDY_SOURCE,
    PAPER,
    PRESET_MIRRORS,
    TABLE5,
    phi_row,
)
from app.recorded_meta import RecordedMeta
from emulator.control.throughput_model import Plan
from emulator.errors import TelemetryError
from emulator.paths import REPO_ROOT
from emulator.scenario import Scenario
from emulator.telemetry.labels import format_number
from emulator.telemetry.run_files import RunFolder

COLUMNS = ("Figure", "Paper", "Project", "Difference", "Paper source")
NONE = "-"
BITS_PER_MIB = 8 * 2**20
PRESET_BENCH = REPO_ROOT / "bench" / "results" / "model_stub_cpu.json"
TTFT_SOURCE = f"{PAPER}, Table 6 (values not in the project's notes)"


@dataclass(frozen=True, slots=True)
class ProjectFigures:
    """The project's side of the case-study table; None where it has no such figure.

    Gains are ratios (1.54 = 54 % more than the baseline), as the paper states them.
    """

    threshold_tokens: float | None
    num_prefill: int | None
    num_decode: int | None
    gain_vs_homogeneous: float | None
    gain_vs_naive: float | None
    egress_gbps: float | None
    link_gbps: float | None
    ttft_noqueue_mean_s: float | None = None
    ttft_noqueue_p90_s: float | None = None

    @classmethod
    def from_plan(cls, plan: Plan, link_gbps: float) -> ProjectFigures:
        """The optimizer's answer: Lambda_max ratios of PrfaaS to each baseline, egress at Lambda_max."""
        best = plan.prfaas
        return cls(best.t, best.n_p, best.n_d, _ratio(best.lambda_max, plan.homogeneous.lambda_max),
                   _ratio(best.lambda_max, plan.naive.lambda_max), best.egress_gbps, link_gbps,
                   best.ttft_noqueue_mean_s, best.ttft_noqueue_p90_s)

    @classmethod
    def from_run(cls, doc: Mapping[str, Any], homogeneous: Mapping[str, Any] | None = None,
                 naive: Mapping[str, Any] | None = None,
                 num_local: int = CASE_STUDY.num_local) -> ProjectFigures:
        """A recorded run's summary.json (`summary` and `meta`): its starting threshold and split,
        mean egress, no-queue TTFT, and throughput over the baselines' runs when they are given.

        `num_local` is the local instance count (n_d = num_local - n_p); the case study has 8.
        """
        summary, meta = doc.get("summary", {}), RecordedMeta.from_doc(doc)
        n_p, link_mbit = meta.n_p_start, meta.bandwidth_mbit
        egress = summary.get("egress_bit_per_s_mean")
        return cls(
            meta.threshold_start, n_p, None if n_p is None else num_local - n_p,
            _throughput_ratio(summary, homogeneous), _throughput_ratio(summary, naive),
            None if egress is None else egress / 1e9, None if link_mbit is None else link_mbit / 1e3,
            summary.get("ttft_noqueue_mean_s"), summary.get("ttft_noqueue_p90_s"),
        )


def _ratio(value: float, reference: float) -> float | None:
    return value / reference if reference > 0 else None


def _throughput_ratio(summary: Mapping[str, Any], baseline: Mapping[str, Any] | None) -> float | None:
    if baseline is None:
        return None
    value, reference = summary.get("throughput_rps"), baseline.get("summary", {}).get("throughput_rps")
    return None if value is None or reference is None else _ratio(value, reference)


def _number(value: float | None, suffix: str = "") -> str:
    """The dashboard's way of writing a figure (telemetry.labels.format_number), its zeros kept
    (the paper's 3.60 and 13.0 say how precise they are), with its unit."""
    text = format_number(value, keep_zeros=True)
    return text if text == NONE else text + suffix


def _percent(ratio: float | None) -> str:
    """A small ratio as a percentage to three significant digits, `6.41%`, `0.883%`: a preset on a
    CPU reaches a few percent of the paper's H200, which `0.0641` hides in its leading zeros."""
    return NONE if ratio is None else format_number(ratio * 100) + "%"


def _relative(project: float | None, paper: float | None) -> str:
    if project is None or paper is None or not (math.isfinite(project) and paper):
        return NONE
    return f"{(project - paper) / paper:+.1%}"


def _share(gbps: float | None, link_gbps: float | None) -> float | None:
    return None if gbps is None or not link_gbps else gbps / link_gbps


def case_study_table(project: ProjectFigures) -> pd.DataFrame:
    """Paper vs project for the case study: t*, split, both throughput gains, egress, no-queue TTFT."""
    paper = CASE_STUDY
    has_split = project.num_prefill is not None and project.num_decode is not None
    split = f"{project.num_prefill}:{project.num_decode}" if has_split else NONE
    same = (project.num_prefill, project.num_decode) == (paper.num_prefill, paper.num_decode)
    share = _share(project.egress_gbps, project.link_gbps)
    share_diff = NONE if share is None else f"{(share - paper.egress_share) * 100:+.1f} points"
    rows = [
        ("Threshold t (tokens)", _number(paper.threshold_tokens), _number(project.threshold_tokens),
         _relative(project.threshold_tokens, paper.threshold_tokens)),
        ("Split N_p:N_d", f"{paper.num_prefill}:{paper.num_decode}", split,
         NONE if not has_split else "same" if same else "differs"),
        ("Throughput ÷ homogeneous PD", _number(paper.gain_vs_homogeneous, "x"),
         _number(project.gain_vs_homogeneous, "x"),
         _relative(project.gain_vs_homogeneous, paper.gain_vs_homogeneous)),
        ("Throughput ÷ naive heterogeneous", _number(paper.gain_vs_naive, "x"),
         _number(project.gain_vs_naive, "x"), _relative(project.gain_vs_naive, paper.gain_vs_naive)),
        ("Egress (Gbit/s)", _number(paper.egress_gbps), _number(project.egress_gbps),
         _relative(project.egress_gbps, paper.egress_gbps)),
        ("Egress share of the link", f"{paper.egress_share:.0%}",
         NONE if share is None else f"{share:.1%}", share_diff),
    ]
    table = [(*row, CASE_STUDY_SOURCE) for row in rows]
    table += [("TTFT no queue, mean (s)", NONE, _number(project.ttft_noqueue_mean_s), NONE, TTFT_SOURCE),
              ("TTFT no queue, P90 (s)", NONE, _number(project.ttft_noqueue_p90_s), NONE, TTFT_SOURCE)]
    return pd.DataFrame(table, columns=list(COLUMNS))


def run_vs_paper_table(doc: Mapping[str, Any], homogeneous: Mapping[str, Any] | None = None,
                       naive: Mapping[str, Any] | None = None) -> pd.DataFrame:
    """`case_study_table` for a recorded run of paper-case-study (its summary.json document)."""
    return case_study_table(ProjectFigures.from_run(doc, homogeneous, naive))


def profile_phi_table(scenario: Scenario) -> pd.DataFrame:
    """Table 5's Phi_kv beside the one the project computes from the scenario's profile,
    S_kv(l) / T_prefill(l) on the remote device, at the lengths both have."""
    profile = scenario.model.profile
    if profile is None:
        raise ValueError(f"scenario {scenario.name}: has no measured profile; use paper-case-study")
    times = profile.prefill_s.get(scenario.clusters.remote.device)
    if times is None:
        raise ValueError(f"scenario {scenario.name}: no prefill_s for the remote device "
                         f"{scenario.clusters.remote.device!r}")
    by_length = {n: (mib, s) for n, mib, s in zip(profile.lengths_tokens, profile.kv_mib, times,
                                                  strict=True)}
    rows = []
    for point in TABLE5:
        measured = by_length.get(point.tokens)  # None: the scenario has no point at this length
        mib, seconds = measured if measured else (None, None)
        phi = None if measured is None else measured[0] * BITS_PER_MIB / measured[1] / 1e9
        rows.append((f"{point.tokens:,}", _number(mib), _number(seconds), _number(point.phi_kv_gbps),
                     _number(phi), _relative(phi, point.phi_kv_gbps)))
    return pd.DataFrame(rows, columns=["Input (tokens)", "S_kv (MiB)", "T_prefill (s)",
                                       "Paper Φ_kv (Gbit/s)", "Project Φ_kv (Gbit/s)", "Difference"])


def load_preset_bench(path: Path = PRESET_BENCH) -> dict[str, Any] | None:
    """The committed `python -m model_stub bench` result, or None when it is missing or unreadable
    (read through run_files: no link followed, size and depth capped)."""
    try:
        doc = RunFolder(path.parent).read_json(path.name)
    except TelemetryError:
        return None
    return doc if isinstance(doc, dict) else None


def preset_phi_table(bench: Mapping[str, Any]) -> pd.DataFrame:
    """Table 3's Phi_kv beside the bench's measured Phi_kv of the preset that mirrors each model,
    at the bench's lengths (Table 3 interpolated linearly between its own lengths)."""
    rows = []
    for preset, models in PRESET_MIRRORS.items():
        measured = bench.get("presets", {}).get(preset, {}).get("prefill", {})
        for model in models:
            for length, point in sorted(measured.items(), key=lambda item: int(item[0])):
                tokens = int(length)
                mbit = point.get("phi_kv_mbit_s")
                try:
                    paper = phi_kv_gbps(phi_row(model), float(tokens))
                except ValueError:
                    continue  # outside Table 3's 1K..128K
                ours = None if mbit is None else mbit / 1e3
                rows.append((preset, model, f"{tokens:,}", _number(paper), _number(ours),
                             _percent(None if ours is None else ours / paper)))
    return pd.DataFrame(rows, columns=["Preset", "Paper model", "Input (tokens)",
                                       "Paper Φ_kv (Gbit/s)", "Preset Φ_kv (Gbit/s)", "Preset ÷ paper"])
