"""The Streamlit dashboard: `Home.py` is the entry page; data-building lives in pure modules."""
