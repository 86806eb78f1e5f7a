"""Opening the app in Streamlit's AppTest, shared by the app's test files: a fresh session on a
page, checked to show no exception and no error box, and the Plotly figures it sends."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

APP = Path(__file__).resolve().parents[1] / "app.py"


def open_page(page: str | None = None, *, timeout: float = 120) -> Any:
    """A fresh session opened on ``page`` (the default page, Overview, when None), each script
    run allowed ``timeout`` seconds, checked to be clean."""
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(str(APP), default_timeout=timeout)
    at.run()
    if page is not None:
        at.switch_page(f"app_pages/{page}.py").run()
    assert_clean(at)
    return at


def live_section(at: Any, section: str) -> Any:
    """The Live page turned to ``section`` ("The live sweep", "Adaptive speculation" or "Dynamic
    trees": it shows one at a time), checked to be clean."""
    at.segmented_control(key="live_section").set_value(section).run()
    assert_clean(at)
    return at


def assert_clean(at: Any) -> None:
    assert not at.exception, [e.value for e in at.exception]
    assert not at.error, [e.value for e in at.error]


def figures(at: Any) -> list[dict]:
    """The Plotly figures of the page, as the JSON the browser receives."""
    return [json.loads(chart.proto.spec) for chart in at.get("plotly_chart")]


def vega_specs(at: Any) -> list[dict]:
    """The Vega-Lite figures of the page, as the spec the browser receives."""
    return [json.loads(chart.proto.spec) for chart in at.get("vega_lite_chart")]
