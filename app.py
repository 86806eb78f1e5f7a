"""treeopt workbench: `streamlit run app.py`. Navigation and the demo chooser only; every page
lives in app_pages/."""

import streamlit as st

from app_pages.preload import preload_plotly
from app_pages.state import demo_chooser
from app_pages.warm import page_run, warm_up

st.set_page_config(page_title="treeopt — speculation tree workbench", page_icon="🌳",
                   layout="wide")

PAGES = [
    st.Page("app_pages/overview.py", title="Overview", icon=":material/dashboard:", default=True),
    st.Page("app_pages/data.py", title="Data", icon=":material/folder_open:"),
    st.Page("app_pages/heads.py", title="Heads", icon=":material/target:"),
    st.Page("app_pages/trees.py", title="Trees", icon=":material/account_tree:"),
    st.Page("app_pages/drafters.py", title="Drafters", icon=":material/compare_arrows:"),
    st.Page("app_pages/hardware.py", title="Hardware", icon=":material/memory:"),
    st.Page("app_pages/live.py", title="Live", icon=":material/speed:"),
    st.Page("app_pages/export.py", title="Export", icon=":material/download:"),
    st.Page("app_pages/verify.py", title="Verify", icon=":material/verified:"),
]

navigation = st.navigation(PAGES)
demo_chooser()  # in the sidebar, under the pages
with page_run():  # the warm-up waits meanwhile
    navigation.run()
warm_up()  # the page has run: what the other pages read is computed meanwhile
preload_plotly()  # and the browser loads the Plotly bundle they draw with
