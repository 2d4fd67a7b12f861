"""KV explorer: cache bytes per token of real models and the presets, S_kv(l) curves, the paper's
measured Phi_kv (Table 3) and the egress a prefill cluster of N GPUs needs (Eq. 2).

Layout only; the numbers come from `app.kv_view`, the figures from `app.figures`.
"""

from __future__ import annotations

import streamlit as st

from app import figures
from app.kv_view import PHI_LENGTHS, make_egress_table, make_kv_table, make_phi_table, make_skv_curves
from app.paper_compare import load_preset_bench, preset_phi_table, profile_phi_table
from app.paper_figures import TABLE3_SOURCE, TABLE5_SOURCE
from app.paper_view import show_text_table
from app.tables import show_table
from app.threshold_view import CASE_STUDY
from emulator.errors import PrfaasError
from emulator.paths import SCENARIOS_DIR
from emulator.scenario import load_scenario
from model_stub.config import SIZES

INTRO = """
Only the growing part of a cache crosses the link in proportion to the prompt: full-attention
(GQA, MLA) layers add bytes with every token, while linear (KDA, GDN) and sliding-window layers
keep a bounded state. Hybrid models therefore ship a fraction of a dense model's KV per token.
"""
# Widths are fitted to the text (app.tables): every column whole on a 1280 px window.
KV_COLUMNS = {
    "model": st.column_config.TextColumn("Model"),
    "source": st.column_config.TextColumn("Source"),
    "kind": st.column_config.TextColumn("Kind"),
    "layers": st.column_config.TextColumn("Layers"),
    "kv_bytes_per_token": st.column_config.NumberColumn("KV bytes/token", format="localized"),
    "fixed_bytes": st.column_config.NumberColumn("Fixed state", format="bytes"),
    "cache_bytes": st.column_config.NumberColumn("Cache at context", format="bytes"),
}
EGRESS_COLUMNS = {
    "model": st.column_config.TextColumn("Model"),
    "phi_kv_gbps": st.column_config.NumberColumn("Φ_kv(L_avg) (Gbit/s)", format="%.3g"),
    "egress_gbps": st.column_config.NumberColumn("B_out (Gbit/s)", format="%.3g"),
    "link_pct": st.column_config.NumberColumn("Share of the link", format="%.3g%%"),
}
PHI_COLUMNS = {
    "model": st.column_config.TextColumn("Model"),
    "layers": st.column_config.TextColumn("Layers"),
    "kind": st.column_config.TextColumn("Kind"),
    **{label: st.column_config.NumberColumn(label, format="%.2f") for label in ("1K", "8K", "32K", "128K")},
}
DEFAULT_CURVES = ("Kimi-Linear-48B-A3B", "Qwen3.5-397B-A17B", "MiMo-V2-Flash (309B)",
                  "MiniMax-M2.5 (229B)", "Llama-3-70B")


def _kv_section() -> None:
    st.subheader("KV bytes per token")
    size_col, tokens_col = st.columns(2, vertical_alignment="bottom")
    size = size_col.radio("Preset size", SIZES, horizontal=True, key="kv_size")
    tokens = int(tokens_col.number_input("Context length (tokens)", value=32_768, step=1024,
                                         key="kv_tokens"))
    try:
        table = make_kv_table(tokens, size)
    except ValueError as err:
        st.error(str(err))
        return
    show_table(table, "kv_table", config=KV_COLUMNS)
    st.caption("Real models in their serving dtypes (KV bf16, recurrent state fp32), from "
               "`model_stub.kv_calculator`; presets in float32.")
    _curves(list(table["model"]), size)


def _curves(models: list[str], size: str) -> None:
    st.subheader("Cache size S_kv(l) against context length")
    chosen = st.multiselect("Models", models, default=[m for m in DEFAULT_CURVES if m in models],
                            key="kv_curve_models")
    log_y = st.toggle("Log y axis", value=True, key="kv_log_y")
    if not chosen:
        st.info("Pick one or more models to draw.")
        return
    st.plotly_chart(figures.skv_figure(make_skv_curves(chosen, size), chosen, log_y), key="skv_chart")


def _phi_section() -> None:
    st.subheader("Measured KV throughput Φ_kv (paper, Table 3)")
    phi = make_phi_table()
    show_table(phi, "kv_phi", config=PHI_COLUMNS)
    st.caption(f"Φ_kv = S_kv(l) / T_prefill(l) in Gbit/s at 1K..128K input tokens, as printed "
               f"(Qin et al., {TABLE3_SOURCE}).")
    st.plotly_chart(figures.phi_figure(phi), key="phi_chart")


def _egress_section() -> None:
    st.subheader("Egress of a prefill cluster (Eq. 2)")
    st.markdown("B_out ≈ (N / P) · Φ_kv(L_avg): N GPUs in instances of P GPUs, each prefilling "
                "requests of mean uncached length L_avg; Φ_kv interpolated linearly between "
                "Table 3's lengths.")
    cols = st.columns(4)
    num_gpus = cols[0].slider("N (GPUs)", 8, 2048, 32, step=8, key="kv_num_gpus")
    per_instance = cols[1].slider("P (GPUs per instance)", 1, 16, 8, key="kv_gpus_per_instance")
    l_avg = cols[2].slider("L_avg (tokens)", PHI_LENGTHS[0], PHI_LENGTHS[-1], 27_648, step=1024,
                           key="kv_l_avg")
    link = cols[3].number_input("Link (Gbit/s)", value=100.0, step=10.0, key="kv_link_gbps")
    try:
        table = make_egress_table(num_gpus, per_instance, float(l_avg), float(link))
    except ValueError as err:
        st.error(str(err))
        return
    shown = table.assign(link_pct=table["link_share"] * 100).drop(columns="link_share")
    for kind in ("hybrid", "dense"):
        st.markdown(f"**{kind.capitalize()} models**")
        show_table(shown[shown["kind"] == kind].drop(columns="kind"), f"kv_egress_{kind}", config=EGRESS_COLUMNS)
    st.plotly_chart(figures.egress_figure(table, float(link)), key="egress_chart")


def _paper_section() -> None:
    st.subheader("Φ_kv: the paper beside the project")
    try:
        case_study = load_scenario(SCENARIOS_DIR / CASE_STUDY)
        profile = profile_phi_table(case_study)
    except (PrfaasError, ValueError, OSError) as err:
        st.error(str(err))
    else:
        st.markdown("**The case study's model (Table 5)**")
        show_text_table(profile)
        st.caption(f"Paper: {TABLE5_SOURCE}. Project: S_kv / T_prefill on the remote device from "
                   f"the profile in scenarios/{CASE_STUDY}, which the emulator runs with.")
    st.markdown("**Table 3 beside the presets that mirror its models**")
    bench = load_preset_bench()
    if bench is None:
        st.info("No preset measurement: run `python -m model_stub bench` to write "
                "bench/results/model_stub_cpu.json.")
        return
    show_text_table(preset_phi_table(bench))
    machine = bench.get("machine", {})
    st.caption(f"Paper: {TABLE3_SOURCE}, interpolated linearly between its lengths. Preset: the "
               f"same layer mix at size {bench.get('settings', {}).get('size', '?')}, measured by "
               f"`python -m model_stub bench` on {machine.get('device', '?')} "
               f"({machine.get('threads', '?')} threads). A preset is a small model prefilled on a "
               "CPU, so its Φ_kv is a small fraction of the paper's; how the ratio moves with the "
               "length is the comparable part.")


st.set_page_config(page_title="KV explorer · PrfaaS Lab", layout="wide")
st.title("KV explorer")
st.markdown(INTRO)
_kv_section()
_phi_section()
_paper_section()
_egress_section()
