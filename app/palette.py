"""One colour per model, route and pool, so a model or a route looks the same on every chart.

Model names come in three spellings (a preset, `preset (size)` in the KV tables, and the paper's
Table 3 name of a real model); all of them resolve to one colour here. Routes and pools are
`emulator.telemetry.palette`'s (report.html draws them too), re-exported here. Charts take their
colours from this module and name none of their own for models, routes, pools, request stages or
decision sources.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

from emulator.telemetry.palette import POOL_COLORS, QUEUE_COLORS, ROUTE_COLORS, queue_color, route_color
from model_stub.config import SIZES

__all__ = ["DECISION_COLORS", "MODEL_ALIASES", "MODEL_COLORS", "POOL_COLORS", "PRESET_DASHES", "PRESET_SYMBOLS",
           "QUEUE_COLORS", "ROUTE_COLORS", "SPARE_COLORS", "STAGE_COLORS", "canonical_model", "color_map",
           "model_color", "queue_color", "route_color"]

MODEL_COLORS: dict[str, str] = {
    # model_stub presets (Home, KV explorer)
    "kimi-linear-mini": "#1f77b4",
    "qwen3-next-mini": "#ff7f0e",
    "mimo-v2-flash-mini": "#2ca02c",
    "dense-gqa-mini": "#7f7f7f",
    # real models (model_stub.real_models names) and the paper's Table 3 models
    "Kimi-Linear-48B-A3B": "#17becf",
    "Qwen3-Next-80B-A3B": "#bcbd22",
    "Qwen3.5-397B-A17B": "#8c564b",
    "MiMo-V2-Flash (309B)": "#9467bd",
    "Ring-2.5-1T": "#e377c2",
    "MiniMax-M2.5 (229B)": "#d62728",
    "Qwen3-235B-A22B": "#393b79",
    "Llama-3-70B": "#222222",
}
# The paper prints some of the real models under shorter names: one model, one colour.
MODEL_ALIASES: dict[str, str] = {
    "Kimi Linear 48B": "Kimi-Linear-48B-A3B",
    "MiMo-V2-Flash 309B": "MiMo-V2-Flash (309B)",
    "Qwen3.5-397B": "Qwen3.5-397B-A17B",
    "MiniMax-M2.5 229B": "MiniMax-M2.5 (229B)",
    "Qwen3-235B": "Qwen3-235B-A22B",
}
# Unknown models still get a stable colour (by a hash of the name, not Python's salted hash).
SPARE_COLORS: tuple[str, ...] = ("#637939", "#843c39", "#7b4173", "#3182bd", "#e6550d", "#31a354")

# A request's stages on the Runs page's timeline. Prefill is neither route's colour (a bar stands for
# either route); decode is the decode pool's green.
STAGE_COLORS: dict[str, str] = {"queue": "#bbbbbb", "prefill": "#17becf", "transfer": "#ff7f0e",
                                "decode": POOL_COLORS["pd_d"]}
# Decision markers by who decided: the scheduler, the scenario's timeline, a control message.
DECISION_COLORS: dict[str, str] = {"scheduler": "#9467bd", "timeline": "#7f7f7f", "control": "#e377c2"}

# Presets whose cache curves nearly coincide (qwen3-next-mini and mimo-v2-flash-mini add the same
# KV bytes per token) need more than colour to tell apart: a dash style and a marker each.
PRESET_DASHES: dict[str, str] = {"kimi-linear-mini": "solid", "qwen3-next-mini": "solid",
                                 "mimo-v2-flash-mini": "dash", "dense-gqa-mini": "dot"}
PRESET_SYMBOLS: dict[str, str] = {"kimi-linear-mini": "circle", "qwen3-next-mini": "diamond",
                                  "mimo-v2-flash-mini": "square-open", "dense-gqa-mini": "x"}


def canonical_model(name: str) -> str:
    """The palette's name for `name`: a size suffix (`kimi-linear-mini (small)`) and the paper's
    spelling of a real model both map to the one key."""
    for size in SIZES:
        name = name.removesuffix(f" ({size})")
    return MODEL_ALIASES.get(name, name)


def model_color(name: str) -> str:
    """The colour of model `name`, in any of its spellings."""
    key = canonical_model(name)
    if key in MODEL_COLORS:
        return MODEL_COLORS[key]
    digest = hashlib.sha1(key.encode()).digest()
    return SPARE_COLORS[digest[0] % len(SPARE_COLORS)]


def color_map(names: Iterable[str]) -> dict[str, str]:
    """{name: colour} for plotly express's `color_discrete_map`."""
    return {name: model_color(name) for name in names}
