"""Tables behind the KV explorer: cache bytes of the real models and the presets (from
`model_stub.kv_calculator`), the paper's measured Phi_kv, and Eq. 2's egress of a prefill cluster.

Pure functions; the page only lays them out. Phi_kv is the paper's measurement (`app.paper_figures`),
not recomputed here; `app.paper_compare` sets the project's own figures beside it.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from app.paper_figures import PHI_KV_TABLE, PHI_LENGTHS, PhiRow
from model_stub.config import PRESET_NAMES, SIZES, get_preset
from model_stub.kv_calculator import REAL_MODELS, RealModelSpec

# 1K..1M tokens in half-octave steps: even spacing on a log x axis.
CURVE_TOKENS: tuple[int, ...] = tuple(round(1024 * 2 ** (step / 2)) for step in range(21))
KV_COLUMNS = ("model", "source", "kind", "layers", "kv_bytes_per_token", "fixed_bytes",
              "cache_bytes")


def kind_of(layer_kinds: list[str] | tuple[str, ...]) -> str:
    """'hybrid' when some layers keep a bounded cache (linear, SWA), else 'dense'."""
    return "dense" if all(kind in ("full", "mla") for kind in layer_kinds) else "hybrid"


def _real_row(spec: RealModelSpec, tokens: int) -> dict[str, object]:
    counts = spec.layer_counts
    return {
        "model": spec.name, "source": "real", "kind": kind_of(tuple(counts)),
        "layers": ", ".join(f"{n} {kind}" for kind, n in counts.items()),
        "kv_bytes_per_token": spec.kv_bytes_per_token(), "fixed_bytes": spec.fixed_bytes(tokens),
        "cache_bytes": spec.cache_bytes(tokens),
    }


def _preset_row(name: str, size: str, tokens: int) -> dict[str, object]:
    config = get_preset(name, size)
    kinds = [kind.value for kind in config.layer_kinds]
    counts = {kind: kinds.count(kind) for kind in dict.fromkeys(kinds)}
    return {
        "model": f"{name} ({size})", "source": "preset", "kind": kind_of(kinds),
        "layers": ", ".join(f"{n} {kind}" for kind, n in counts.items()),
        "kv_bytes_per_token": config.kv_bytes_per_token(), "fixed_bytes": config.fixed_bytes(tokens),
        "cache_bytes": config.cache_bytes(tokens),
    }


def make_kv_table(tokens: int, size: str = "small") -> pd.DataFrame:
    """One row per real model, then per preset at `size`: KV bytes per token and the cache at
    `tokens` (real models in their serving dtypes, presets in theirs; see kv_calculator)."""
    _check_tokens(tokens)
    if size not in SIZES:
        raise ValueError(f"size: {size!r} is unknown; choose one of {', '.join(SIZES)}")
    rows = [_real_row(spec, tokens) for spec in REAL_MODELS.values()]
    rows += [_preset_row(name, size, tokens) for name in PRESET_NAMES]
    return pd.DataFrame(rows, columns=list(KV_COLUMNS))


def make_skv_curves(models: list[str], size: str = "small",
                    tokens_grid: tuple[int, ...] = CURVE_TOKENS) -> pd.DataFrame:
    """Long-form (model, kind, tokens, cache_bytes): S_kv(l) of each named model (a REAL_MODELS
    display name or 'preset (size)' as in make_kv_table)."""
    by_name = {spec.name: spec for spec in REAL_MODELS.values()}
    rows = []
    for model in models:
        if model in by_name:
            spec = by_name[model]
            kind = kind_of(tuple(spec.layer_counts))
            rows += [{"model": model, "kind": kind, "tokens": n, "cache_bytes": spec.cache_bytes(n)}
                     for n in tokens_grid]
            continue
        preset = model.removesuffix(f" ({size})")
        if preset not in PRESET_NAMES:
            raise ValueError(f"model: {model!r} is unknown; pick one from the KV table")
        config = get_preset(preset, size)
        kind = kind_of([k.value for k in config.layer_kinds])
        rows += [{"model": model, "kind": kind, "tokens": n, "cache_bytes": config.cache_bytes(n)}
                 for n in tokens_grid]
    return pd.DataFrame(rows, columns=["model", "kind", "tokens", "cache_bytes"])


def make_phi_table() -> pd.DataFrame:
    """Table 3 as printed: one row per model, Phi_kv (Gbit/s) at 1K, 8K, 32K and 128K."""
    rows = [{"model": r.model, "layers": r.layers, "kind": "hybrid" if r.is_hybrid else "dense",
             **{_length_label(n): g for n, g in zip(PHI_LENGTHS, r.gbps, strict=True)}}
            for r in PHI_KV_TABLE]
    return pd.DataFrame(rows)


def _length_label(tokens: int) -> str:
    return f"{tokens // 1024}K"


def phi_kv_gbps(row: PhiRow, l_avg: float) -> float:
    """Phi_kv at `l_avg` tokens, piecewise-linear between the table's lengths (1K..128K only)."""
    lo, hi = PHI_LENGTHS[0], PHI_LENGTHS[-1]
    if not (math.isfinite(l_avg) and lo <= l_avg <= hi):
        raise ValueError(f"L_avg: {l_avg:g} tokens is outside the measured {lo:,}..{hi:,}; "
                         "pick a length inside Table 3's range")
    return float(np.interp(l_avg, PHI_LENGTHS, row.gbps))


def egress_gbps(num_gpus: int, gpus_per_instance: int, l_avg: float, row: PhiRow) -> float:
    """Eq. 2: B_out ~= (N / P) * Phi_kv(L_avg), in Gbit/s."""
    if num_gpus < 1:
        raise ValueError(f"N: {num_gpus} GPUs; use 1 or more")
    if gpus_per_instance < 1:
        raise ValueError(f"P: {gpus_per_instance} GPUs per instance; use 1 or more")
    return num_gpus / gpus_per_instance * phi_kv_gbps(row, l_avg)


def make_egress_table(num_gpus: int, gpus_per_instance: int, l_avg: float,
                      link_gbps: float | None = None) -> pd.DataFrame:
    """Eq. 2 for every Table 3 model: Phi_kv(L_avg), B_out, and whether a link of `link_gbps` fits."""
    if link_gbps is not None and not (math.isfinite(link_gbps) and link_gbps > 0):
        raise ValueError(f"link: {link_gbps} Gbit/s; use a positive bandwidth")
    rows = []
    for row in PHI_KV_TABLE:
        phi = phi_kv_gbps(row, l_avg)
        out = egress_gbps(num_gpus, gpus_per_instance, l_avg, row)
        rows.append({"model": row.model, "kind": "hybrid" if row.is_hybrid else "dense",
                     "phi_kv_gbps": phi, "egress_gbps": out,
                     "link_share": out / link_gbps if link_gbps else None})
    return pd.DataFrame(rows, columns=["model", "kind", "phi_kv_gbps", "egress_gbps", "link_share"])


def _check_tokens(tokens: int) -> None:
    if tokens < 0:
        raise ValueError(f"tokens: {tokens} is negative; use 0 or more")
