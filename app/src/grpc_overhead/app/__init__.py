"""The Streamlit app: thin pages over analyzer functions that return DataFrames.

``runtime`` holds the store this process serves (a chDB directory belongs to
one process, so the app runs inside ``serve``/``app``/``demo``); ``main`` is
the Streamlit script with the page navigation.
"""
