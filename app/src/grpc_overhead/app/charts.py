"""Chart and table layout every page shares: legends that show every entry at the default
width, tables that show every row (``ALL_ROWS``).

Plotly puts a legend to the right of the plot and, when the figure is too
short for its entries, clips it behind a scrollbar: a stacked bar of one
method (190 px tall) showed 1.5 of its nine phases. Above the plot, laid out
horizontally, a legend wraps into rows instead, and the figure grows by the
rows it needs, so every entry is visible however few bars there are.
"""

from __future__ import annotations

import math

import plotly.graph_objects as go

#: ``st.dataframe(height=...)`` of every table with a bounded set of rows (phases, methods,
#: instances, algorithms): all of them, never Streamlit's default of ten and a scrollbar
#: (which hid the Phases table's last row, unattributed, "shown, never hidden"). Lists
#: the user sizes (the explorer's calls, the SQL page's rows) keep the default and scroll.
ALL_ROWS = "content"

#: Legend entries per row at the app's default width (a phase name is about 150 px;
#: a wide layout's chart is about 1,000 px at a 1,400 px window): a safe under-estimate.
ENTRIES_PER_ROW = 4
ROW_PX = 24
#: Room for the plot itself, its axes and title, below the legend.
MIN_PLOT_PX = 160


def legend_on_top(figure: go.Figure, plot_px: int | None = None, title: str | None = None) -> None:
    """Move the legend above the plot, horizontal, and make the figure tall enough for
    ``plot_px`` of plot plus every legend row (entries = the traces shown in it)."""
    entries = len({trace.name for trace in figure.data if trace.showlegend is not False})
    rows = max(1, math.ceil(entries / ENTRIES_PER_ROW))
    legend = {"orientation": "h", "yanchor": "bottom", "y": 1.02, "xanchor": "left", "x": 0}
    if title is not None:
        legend["title_text"] = title
    figure.update_layout(legend=legend, margin={"t": 30 + rows * ROW_PX})
    if plot_px is not None:
        figure.update_layout(height=max(plot_px, MIN_PLOT_PX) + 60 + rows * ROW_PX)
