"""Streamlit's Plotly bundle, loaded in the browser while a person reads the first view.

Streamlit fetches and runs a chart library's JavaScript the first time a page shows one of its
charts. Its Plotly bundle is 4.7 MB, and running it costs a new tab about 0.9 s of the
browser's main thread on the 2-core reference host (`benchmarks/bench_app.py`). The Overview,
the page a tab lands on, draws its figure with Vega-Lite (about 0.2 s) so that it shows at
once; every other page draws Plotly. So that the first of those a person opens does not pay
the 0.9 s either, :func:`preload_plotly` asks the browser, once it is idle after a run, to
import the same module Streamlit would import for its first Plotly chart: the browser keeps
one instance per URL, so the chart's own import then finds it done.

The bundle's file name is Streamlit's (``static/js/PlotlyChart.<hash>.js`` in the installed
package; a test holds the pinned version to it). Where it is not found, nothing is preloaded
and the first Plotly page loads it itself, as it would without this module.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path

import streamlit as st

BUNDLE_GLOB = "PlotlyChart.*.js"


@functools.cache
def plotly_bundle() -> str | None:
    """The file name of Streamlit's Plotly bundle in the installed package, or None."""
    found = sorted((Path(st.__file__).parent / "static" / "static" / "js").glob(BUNDLE_GLOB))
    return found[0].name if len(found) == 1 else None


def preload_script(bundle: str) -> str:
    """The script that imports ``bundle`` once per tab, when the browser is idle. It resolves
    the bundle beside Streamlit's own entry script, so any base URL path works."""
    return f"""<script>
(() => {{
  const entry = document.querySelector('script[src*="static/js/index."]');
  if (!entry || window.treeoptPlotlyPreload) return;
  window.treeoptPlotlyPreload = true;
  const bundle = new URL({json.dumps(bundle)}, entry.src).href;
  const idle = window.requestIdleCallback || (f => setTimeout(f, 200));
  idle(() => import(bundle).catch(() => {{ window.treeoptPlotlyPreload = false; }}),
       {{timeout: 3000}});
}})();
</script>"""


def preload_plotly() -> None:
    """Preload the Plotly bundle in this tab (in the sidebar: no space in the page)."""
    bundle = plotly_bundle()
    if bundle is not None:
        st.sidebar.html(preload_script(bundle), unsafe_allow_javascript=True)
