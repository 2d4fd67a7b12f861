"""Tables behind the Home page: model presets and their cache sizes, as pandas DataFrames.

Pure functions of (size, tokens) over `model_stub.config`, so tests check them without Streamlit.
"""

from __future__ import annotations

import itertools

import pandas as pd

from model_stub.config import PRESET_NAMES, get_preset

# 1K..128K tokens in half-octave steps: even spacing on the chart's log x axis.
CURVE_TOKENS: tuple[int, ...] = tuple(round(1024 * 2 ** (step / 2)) for step in range(15))

TABLE_COLUMNS = (
    "preset", "layers", "pattern", "d_model", "kv_bytes_per_token", "fixed_bytes", "cache_bytes",
)


def make_presets_table(size: str, tokens: int) -> pd.DataFrame:
    """One row per preset: its layout, KV bytes per token and cache bytes after `tokens` tokens.

    `fixed_bytes` is the bounded part (recurrent/conv states, SWA windows); `cache_bytes` adds the
    growing full-attention KV, which is what PrfaaS ships across datacenters.
    """
    if tokens < 0:
        raise ValueError(f"tokens: {tokens} is negative; use 0 or more")
    rows = []
    for name in PRESET_NAMES:
        config = get_preset(name, size)
        rows.append(
            {
                "preset": name,
                "layers": config.num_layers,
                "pattern": compact_pattern(config.pattern),
                "d_model": config.d_model,
                "kv_bytes_per_token": config.kv_bytes_per_token(),
                "fixed_bytes": config.fixed_bytes(tokens),
                "cache_bytes": config.cache_bytes(tokens),
            }
        )
    return pd.DataFrame(rows, columns=list(TABLE_COLUMNS))


def make_cache_curves(size: str, tokens_grid: tuple[int, ...] = CURVE_TOKENS) -> pd.DataFrame:
    """Long-form (preset, tokens, cache_bytes) rows: one curve per preset for a line chart."""
    rows = []
    for name in PRESET_NAMES:
        config = get_preset(name, size)
        rows += [
            {"preset": name, "tokens": tokens, "cache_bytes": config.cache_bytes(tokens)}
            for tokens in tokens_grid
        ]
    return pd.DataFrame(rows, columns=["preset", "tokens", "cache_bytes"])


def coinciding_presets(size: str) -> list[tuple[str, str]]:
    """Pairs of presets (in PRESET_NAMES order) that add the same KV bytes per token at `size`:
    their cache curves differ only by a fixed offset, so on a chart they nearly coincide."""
    per_token = {name: get_preset(name, size).kv_bytes_per_token() for name in PRESET_NAMES}
    return [(a, b) for i, a in enumerate(PRESET_NAMES) for b in PRESET_NAMES[i + 1:]
            if per_token[a] == per_token[b]]


def compact_pattern(pattern: str) -> str:
    """A layer pattern written by its repeating unit: `kda,kda,kda,mla,kda,kda,kda,mla` ->
    `(3 kda, mla) × 2`, `full,full,full` -> `3 full`: the layout at a glance, in a narrow column."""
    kinds = pattern.split(",")
    period = next(p for p in range(1, len(kinds) + 1)
                  if len(kinds) % p == 0 and kinds == kinds[:p] * (len(kinds) // p))
    runs = [(kind, len(list(group))) for kind, group in itertools.groupby(kinds[:period])]
    repeats = len(kinds) // period
    if len(runs) == 1:
        return f"{repeats * runs[0][1]} {runs[0][0]}"
    unit = ", ".join(kind if count == 1 else f"{count} {kind}" for kind, count in runs)
    return f"({unit}) × {repeats}" if repeats > 1 else unit
