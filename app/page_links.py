"""Links between the dashboard's pages that keep the session (and so the run being watched).

`st.page_link` finds pages relative to the entry script (app/Home.py). A page run on its own (as
AppTest runs one) has no such pages, so the link falls back to a plain URL.
"""

from __future__ import annotations

import streamlit as st
from streamlit.errors import StreamlitPageNotFoundError

PAGES = {"Home": "Home.py", "Live": "pages/1_Live.py", "Runs": "pages/2_Runs.py",
         "KV explorer": "pages/3_KV_explorer.py", "Threshold explorer": "pages/4_Threshold_explorer.py",
         "Classroom": "pages/5_Classroom.py", "Sweeps": "pages/6_Sweeps.py"}


def page_link(name: str, label: str | None = None) -> None:
    """A link to the page called `name` (a key of PAGES)."""
    label = label or f"Open the {name} page"
    try:
        st.page_link(PAGES[name], label=label, icon=":material/arrow_forward:")
    except StreamlitPageNotFoundError:
        url = "/" if name == "Home" else "/" + name.replace(" ", "_")
        st.markdown(f"[{label}]({url})")
