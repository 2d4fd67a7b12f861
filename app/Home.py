"""PrfaaS Lab home page: what PrfaaS is, and how large each model preset's cache grows.

Served by `make run` (which installs the project editable into .venv, so no PYTHONPATH is needed).
It reads model presets only (its chart is `app.figures.cache_figure`); runs, knobs and live panels
are on the Live page.
"""

from __future__ import annotations

import streamlit as st

from app.figures import cache_figure
from app.presets_view import coinciding_presets, make_cache_curves, make_presets_table
from app.tables import show_table
from model_stub.config import SIZES

INTRO = """
**Prefill-as-a-Service (PrfaaS)** splits LLM serving across datacenters: long prompts are
prefilled in a remote, compute-dense cluster, and their KV cache is streamed back over an
ordinary Ethernet link to a local prefill/decode cluster, which decodes. Short prompts stay local;
a length threshold routes each request. This pays off for hybrid-attention models, where most
layers keep a fixed-size recurrent or windowed state and only a few full-attention layers grow
with the context, so each token adds little to ship. The presets below mirror such layouts.
"""

# Widths are fitted to the text (app.tables), so every column shows whole on a 1280 px window.
COLUMN_CONFIG = {
    "preset": st.column_config.TextColumn("Preset"),
    "layers": st.column_config.NumberColumn("Layers"),
    "pattern": st.column_config.TextColumn(
        "Layer pattern", help="The layer kinds in order, by their repeating unit: (3 kda, mla) × 2 is "
        "kda,kda,kda,mla twice"),
    "d_model": st.column_config.NumberColumn("d_model"),
    "kv_bytes_per_token": st.column_config.NumberColumn(
        "KV bytes/token", format="localized", help="Growing cache one more token adds (full-attention layers)",
    ),
    "fixed_bytes": st.column_config.NumberColumn(
        "Fixed state", format="bytes", help="Recurrent and conv states, sliding windows"
    ),
    "cache_bytes": st.column_config.NumberColumn(
        "Cache at context", format="bytes", help="Fixed state plus growing KV at the chosen length"
    ),
}


def _cache_chart(size: str, tokens: int, log_y: bool) -> None:
    """Cache size vs context length, one line per preset (`figures.cache_figure`), and which
    presets' lines nearly coincide."""
    st.plotly_chart(cache_figure(make_cache_curves(size), tokens, log_y), key="cache_chart")
    for first, second in coinciding_presets(size):
        st.caption(f"{first} and {second} add the same KV bytes per token and differ only by their "
                   "fixed state, so their lines nearly coincide; their dash styles and markers tell "
                   "them apart.")


st.set_page_config(page_title="PrfaaS Lab", layout="wide")
st.title("PrfaaS Lab")
st.markdown(INTRO)

size_col, tokens_col, log_col = st.columns([1, 1, 1], vertical_alignment="bottom")
size = size_col.radio("Model size", SIZES, horizontal=True, key="size")
tokens = int(
    tokens_col.number_input(
        "Context length (tokens)", min_value=0, max_value=1 << 20, value=32_768, step=1024,
        key="tokens",
    )
)
log_y = log_col.toggle("Log y axis", value=False, key="log_y")

st.subheader("Model presets")
show_table(make_presets_table(size, tokens), "home_presets", config=COLUMN_CONFIG)
st.caption(
    f"Sizes at {tokens:,} tokens in float32. A PrfaaS request ships its whole cache once; "
    "the KV bytes/token part is what grows with the prompt."
)

st.subheader("Cache size vs context length")
_cache_chart(size, tokens, log_y)

st.markdown(
    "**More pages** (sidebar): *Live* starts a scenario, turns its knobs and charts it as it runs; "
    "*Runs* opens and compares recorded runs; *KV explorer* compares real models' KV sizes and the "
    "egress a prefill cluster needs; *Threshold explorer* finds the best threshold and "
    "prefill/decode split for a scenario; *Classroom* is a guided tour in six steps; *Sweeps* runs "
    "a scenario over a grid of settings on Ray and charts the result."
)
