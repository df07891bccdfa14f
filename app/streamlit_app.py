"""The app under Streamlit's own launcher: ``streamlit run app/streamlit_app.py``.

    streamlit run app/streamlit_app.py                        # ./grpc-overhead-data
    streamlit run app/streamlit_app.py -- --store DIR         # or GRPC_OVERHEAD_STORE=DIR
    streamlit run app/streamlit_app.py -- --clickhouse http://127.0.0.1:8123
                                                  # or GRPC_OVERHEAD_CLICKHOUSE_URL=URL

A store directory that a running ``grpc-overhead serve`` owns is read through
serve's ClickHouse HTTP interface (``open_store`` finds it; the credentials
come from GRPC_OVERHEAD_HTTP_USER / GRPC_OVERHEAD_HTTP_PASSWORD); a free one
is opened here, in this process, and prepared as ``grpc-overhead app`` does.
``--clickhouse`` takes a ClickHouse server (``clickhouse://host:9000/db``) or
any HTTP interface, a serve's included. The store is opened once per process
(Streamlit reruns this script for every interaction) and registered for the
pages, exactly as ``grpc-overhead app`` registers its own; then the same
``main.py`` draws the same pages.
"""

from __future__ import annotations

import argparse
import os
import runpy
import sys

import streamlit as st

from grpc_overhead.analyzer.errors import AnalyzerError
from grpc_overhead.analyzer.options import CallsOptions
from grpc_overhead.analyzer.readiness import prepare_for_reading
from grpc_overhead.analyzer.schema import SchemaOptions
from grpc_overhead.analyzer.store import DEFAULT_STORE_DIR, open_store
from grpc_overhead.app import runtime
from grpc_overhead.app.app_server import MAIN_SCRIPT
from grpc_overhead.instrumentation import environment


def _arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="streamlit run app/streamlit_app.py --", description="The grpc-overhead app."
    )
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--store", metavar="DIR", default=os.environ.get(environment.STORE))
    where.add_argument(
        "--clickhouse", metavar="URL", default=os.environ.get(environment.CLICKHOUSE_URL)
    )
    parser.add_argument(
        "--jaeger-url", metavar="URL", default=os.environ.get(environment.JAEGER_URL, "")
    )
    arguments, _ = parser.parse_known_args(sys.argv[1:])
    return arguments


@st.cache_resource(show_spinner="Opening the store...")
def _attach(store_dir: str | None, clickhouse_url: str | None, jaeger_url: str) -> runtime.Served:
    """Open and prepare the store once per process; raises AnalyzerError with what to do."""
    if clickhouse_url and store_dir:  # the environment gave one, the command line the other
        store_dir = None
    store = open_store(
        None if clickhouse_url else (store_dir or DEFAULT_STORE_DIR),
        clickhouse_url or None,
        http_user=os.environ.get(environment.HTTP_USER),
        http_password=os.environ.get(environment.HTTP_PASSWORD),
    )
    options = CallsOptions.from_schema(SchemaOptions.for_store(store))
    missing = prepare_for_reading(store, options)
    if missing:
        store.close()
        raise AnalyzerError(
            f"{missing}: start `grpc-overhead serve --store DIR` and send it spans, "
            "or point this app at a store that has some"
        )
    served = runtime.Served(store, options, jaeger_url=jaeger_url, live=not store.backend.owns_data)
    runtime.register(served)
    return served


def main() -> None:
    arguments = _arguments()
    try:
        served = _attach(arguments.store, arguments.clickhouse, arguments.jaeger_url)
    except AnalyzerError as error:
        st.error(f"grpc-overhead: {error}")
        st.stop()
    if runtime.served() is not served:  # registered by an earlier run, or replaced
        runtime.register(served)
    runpy.run_path(str(MAIN_SCRIPT), run_name="__main__")


main()
