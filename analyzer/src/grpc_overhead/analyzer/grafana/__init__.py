"""Grafana dashboards (ClickHouse datasource) over the analyzer's calls: ``dashboards/``.

``source`` renders the report's per-call query for the datasource's macros,
``panels`` writes Grafana's JSON model, ``dashboards`` defines the dashboards,
and ``python -m grpc_overhead.analyzer.grafana DIR`` writes them (the committed
files in ``dashboards/`` are its output; a test keeps them in step).
"""
