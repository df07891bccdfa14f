"""Read what a page drew: plotly figures and metrics out of a finished AppTest."""

from __future__ import annotations

import base64
import json
from typing import Any

import numpy as np
from streamlit.testing.v1 import AppTest


def figures(at: AppTest) -> dict[str, dict[str, Any]]:
    """Every plotly chart on the page by its widget key (the id ends with ``-<key>``)."""
    return {
        chart.proto.id.rsplit("-", 1)[-1]: json.loads(chart.proto.spec)
        for chart in at.get("plotly_chart")
    }


def values(data: Any) -> list[Any]:
    """A trace's x or y as a list: plotly sends numpy arrays base64-encoded ('bdata')."""
    if isinstance(data, dict) and "bdata" in data:
        array = np.frombuffer(base64.b64decode(data["bdata"]), dtype=np.dtype(data["dtype"]))
        return array.reshape(data["shape"]).tolist() if "shape" in data else array.tolist()
    return list(data)


def traces(figure: dict[str, Any]) -> dict[str, dict[str, list[Any]]]:
    """{trace name: {"x": [...], "y": [...]}} of a figure."""
    return {
        trace.get("name", ""): {axis: values(trace.get(axis, [])) for axis in ("x", "y")}
        for trace in figure["data"]
    }


def metrics(at: AppTest) -> dict[str, str]:
    """{label: shown value} of every st.metric."""
    return {metric.label: metric.value for metric in at.metric}
