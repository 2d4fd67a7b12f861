"""The PrfaaS paper's published figures, each with where it is printed, so pages can set the
project's numbers beside them.

Numbers only, copied from Qin et al., "Prefill-as-a-Service: KVCache of Next-Generation Models
Could Go Cross-Datacenter", arXiv 2604.15039 (2026), via shared/paper-model.md. Comparisons live
in `app.paper_compare`. Table 6's TTFT values are not in the project's notes, so none are here.
"""

from __future__ import annotations

from dataclasses import dataclass

PAPER = "arXiv 2604.15039"
CASE_STUDY_SOURCE = f"{PAPER}, abstract and §4 case study"


@dataclass(frozen=True, slots=True)
class CaseStudyFigures:
    """The headline results of the paper's case study (4 x 8 H200 PrfaaS + 8 x 8 H20 PD, ~100 Gbit/s)."""

    threshold_tokens: float  # optimal routing threshold t
    num_prefill: int  # local split N_p:N_d
    num_decode: int
    gain_vs_homogeneous: float  # serving throughput / homogeneous PD's (1.54 = 54 % higher)
    gain_vs_naive: float  # serving throughput / naive heterogeneous's
    egress_gbps: float  # mean cross-datacenter KV egress
    link_gbps: float  # the cross-datacenter link it used

    @property
    def num_local(self) -> int:
        return self.num_prefill + self.num_decode

    @property
    def egress_share(self) -> float:
        return self.egress_gbps / self.link_gbps


CASE_STUDY = CaseStudyFigures(
    threshold_tokens=19_400, num_prefill=3, num_decode=5, gain_vs_homogeneous=1.54,
    gain_vs_naive=1.32, egress_gbps=13.0, link_gbps=100.0,
)

# Input lengths (tokens) at which Tables 3 and 5 are measured: 1K, 8K, 32K, 128K.
PHI_LENGTHS: tuple[int, ...] = (1024, 8192, 32768, 131072)
TABLE3_SOURCE = f"{PAPER}, Table 3 (8 x H200, SGLang 0.5.9)"
TABLE5_SOURCE = f"{PAPER}, Table 5 (case-study model, 8 x H200)"


@dataclass(frozen=True, slots=True)
class PhiRow:
    """One model of Table 3: measured Phi_kv = S_kv(l) / T_prefill(l) in Gbit/s at PHI_LENGTHS."""

    model: str
    layers: str  # the paper's layer-mix column
    is_hybrid: bool
    gbps: tuple[float, float, float, float]


PHI_KV_TABLE: tuple[PhiRow, ...] = (
    PhiRow("Kimi Linear 48B", "KDA:MLA 3:1", True, (1.19, 2.29, 3.87, 4.88)),
    PhiRow("MiMo-V2-Flash 309B", "SWA:GQA 5:1", True, (0.82, 2.85, 4.66, 4.71)),
    PhiRow("Qwen3.5-397B", "GDN:GQA 3:1", True, (4.13, 6.28, 8.25, 7.47)),
    PhiRow("Ring-2.5-1T", "Lightning:MLA 7:1", True, (7.27, 4.47, 2.59, 1.46)),
    PhiRow("MiniMax-M2.5 229B", "GQA (dense)", False, (4.94, 32.87, 59.93, 47.82)),
    PhiRow("Qwen3-235B", "GQA (dense)", False, (4.12, 22.42, 33.35, 21.50)),
)


@dataclass(frozen=True, slots=True)
class ProfilePoint:
    """One row of Table 5: the case-study model's remote prefill at one input length."""

    tokens: int
    s_kv_mib: float
    t_prefill_s: float
    phi_kv_gbps: float


TABLE5: tuple[ProfilePoint, ...] = (
    ProfilePoint(1024, 190.8, 0.44, 3.61),
    ProfilePoint(8192, 308.9, 0.72, 3.59),
    ProfilePoint(32768, 701.3, 1.84, 3.19),
    ProfilePoint(131072, 2316.3, 7.40, 2.62),
)

# Which preset mirrors which Table 3 model (the same layer mix; model_stub/config.py's _LAYOUTS).
PRESET_MIRRORS: dict[str, tuple[str, ...]] = {
    "kimi-linear-mini": ("Kimi Linear 48B",),
    "qwen3-next-mini": ("Qwen3.5-397B",),
    "mimo-v2-flash-mini": ("MiMo-V2-Flash 309B",),
    "dense-gqa-mini": ("MiniMax-M2.5 229B", "Qwen3-235B"),
}


def phi_row(model: str) -> PhiRow:
    """Table 3's row for `model` (its name as the paper prints it)."""
    for row in PHI_KV_TABLE:
        if row.model == model:
            return row
    raise KeyError(f"model: {model!r} is not in Table 3; use one of "
                   f"{', '.join(r.model for r in PHI_KV_TABLE)}")
