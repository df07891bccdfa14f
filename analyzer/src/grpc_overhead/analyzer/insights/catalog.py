"""What the store holds: the choices behind the app's filters, whether anything matches, and
which stored names a filter typed by a user means.

Both read the unmerged call halves (no ``FINAL``): they run on every page
load, so they must stay cheap at millions of calls, and a half carries the
service, method and run of its call just as the merged row does.
"""

from __future__ import annotations

import pandas as pd

from grpc_overhead.analyzer.clock_offsets import query_parameters
from grpc_overhead.analyzer.errors import BadInput
from grpc_overhead.analyzer.options import (
    CALL_FILTER,
    ROW_FILTER,
    TIME_FILTER,
    CallFilters,
    CallsOptions,
)
from grpc_overhead.analyzer.store.base import Store, any_row

#: At most this many (service, method, run) choices: a filter list, not a report.
MAX_CHOICES = 500


def filter_choices(
    store: Store, filters: CallFilters | None = None, *, options: CallsOptions | None = None
) -> pd.DataFrame:
    """(service, method, run_id, calls) combinations in the time range, busiest first,
    with ``otel_services``: the OpenTelemetry service names (client and server) of
    their calls, in the same scan.

    Only the time part of ``filters`` applies: the sidebar offers every
    method of the chosen period, whatever method is selected now.
    """
    options = options or CallsOptions()
    filters = filters or CallFilters()
    time_only = CallFilters(since=filters.since, until=filters.until)
    sql = (
        # One row per call carries its client half (merged or not): counting those is
        # exact for every call whose client reported, without hashing a million keys.
        "SELECT service, method, run_id,"
        " greatest(countIf(client_start_ns != 0), uniqIf(TraceId, client_start_ns = 0)) AS calls,"
        " arrayFilter(name -> name != '', arrayDistinct(arrayConcat(groupUniqArray(50)"
        "(client_service), groupUniqArray(50)(server_service)))) AS otel_services\n"
        f"FROM {options.calls}\nWHERE {ROW_FILTER}\n"
        "GROUP BY service, method, run_id\nORDER BY calls DESC, service, method, run_id\n"
        "LIMIT {max_choices:UInt32}"
    )
    parameters = {**query_parameters(time_only, None), "max_choices": MAX_CHOICES}
    return store.query(sql, parameters, readonly=True)


def presence(
    store: Store, filters: CallFilters | None = None, *, options: CallsOptions | None = None
) -> pd.DataFrame:
    """One row: ``stored`` (any call at all) and ``matching`` (any call the filters keep), 0/1.

    Lets the app tell an empty store (say how to send data) from filters
    that exclude everything (say which to widen).
    """
    options = options or CallsOptions()
    # One half's start stands for the call's: the other half's is 0 in its row.
    halves = (
        "SELECT service, method, run_id, client_service, server_service,"
        " greatest(client_start_ns, server_start_ns) AS call_start_ns"
        f" FROM {options.calls} WHERE {ROW_FILTER}"
    )
    sql = (
        f"SELECT (SELECT count() FROM (SELECT 1 FROM {options.calls} LIMIT 1)) AS stored,\n"
        f"    (SELECT count() FROM (SELECT 1 FROM ({halves})\n"
        f"     WHERE {TIME_FILTER} AND {CALL_FILTER} LIMIT 1)) AS matching"
    )
    return store.query(sql, query_parameters(filters, None), readonly=True)


# -- names as the tool prints them ----------------------------------------------------------


def known_names(store: Store, *, options: CallsOptions | None = None) -> pd.DataFrame:
    """Every (service, method) pair and OpenTelemetry service name stored: columns
    ``service``, ``method``, ``client_service``, ``server_service``, one row per
    combination (read from the unmerged halves, so cheap at any size)."""
    options = options or CallsOptions()
    return store.query(
        "SELECT DISTINCT service, method, client_service, server_service"
        f" FROM {options.calls} ORDER BY service, method LIMIT {{limit:UInt32}}",
        {"limit": MAX_CHOICES * 10},
        readonly=True,
    )


def check_run(store: Store, run_id: str, *, options: CallsOptions | None = None) -> None:
    """Raise ``BadInput`` listing the stored run ids, most recent first, unless
    ``run_id`` has calls: a mistyped ``--run`` is a mistake to name, not an empty
    report that looks like a quiet period."""
    options = options or CallsOptions()
    if any_row(store, options.calls, "run_id = {run:String}", {"run": run_id}):
        return
    runs = store.query(
        "SELECT run_id FROM (SELECT run_id,"
        " max(greatest(client_start_ns, server_start_ns)) AS last"
        f" FROM {options.calls} WHERE run_id != '' GROUP BY run_id)"
        " ORDER BY last DESC LIMIT {limit:UInt32}",
        {"limit": MAX_CHOICES},
        readonly=True,
    )
    raise BadInput(f"no calls of run {run_id!r}; known runs: {_listing(list(runs['run_id']))}")


def _listing(names: list[str]) -> str:
    shown = ", ".join(names[:20]) or "none yet"
    return shown + (f" (and {len(names) - 20} more)" if len(names) > 20 else "")


def resolve_names(
    names: pd.DataFrame,
    service: str | None,
    method: str | None,
    otel_service: str | None = None,
) -> tuple[str | None, str | None]:
    """(gRPC service, method) for a filter typed the ways the tool prints names.

    ``method`` may be the full name ``report`` prints (``pkg.Service/Method``,
    also with gRPC's leading ``/``), ``Service/Method`` (the service without its
    package), or the method alone (every service's method of that name);
    ``service`` may lack its package too. Raises ``BadInput`` listing the known
    names when nothing matches, or the candidates when a short name is
    ambiguous. ``otel_service`` must be a stored client or server
    ``OTEL_SERVICE_NAME``. ``names`` is ``known_names``.
    """
    pairs = names.drop_duplicates(["service", "method"])
    full = sorted(
        f"{s}/{m}" if s else m for s, m in zip(pairs["service"], pairs["method"], strict=True)
    )
    if otel_service:
        otel = sorted({*names["client_service"], *names["server_service"]} - {""})
        if otel_service not in otel:
            raise BadInput(
                f"no calls from or to the OpenTelemetry service {otel_service!r}; "
                f"known: {_listing(otel)}"
            )
    if method:
        text = method.strip().lstrip("/")
        if "/" in text:
            typed_service, method = text.rsplit("/", 1)
            if service and _short(service) != _short(typed_service):
                raise BadInput(
                    f"--method {text!r} names another service than --service {service!r}"
                )
            service = service or typed_service
        else:
            method = text
        if not (pairs["method"] == method).any():
            raise BadInput(f"no calls of method {method!r}; known methods: {_listing(full)}")
    if service:
        services = sorted(set(pairs["service"]) - {""})
        if service not in services:
            with_method = set(pairs["service"][pairs["method"] == method]) if method else None
            matches = [
                known
                for known in services
                if _short(known) == service and (with_method is None or known in with_method)
            ]
            if not matches:
                # An OTEL_SERVICE_NAME (what Go and Java fleets are known by) is not the
                # gRPC service: say which option takes it.
                otel = {*names["client_service"], *names["server_service"]} - {""}
                hint = (
                    f" ({service!r} is an OpenTelemetry service name: --otel-service {service})"
                    if service in otel
                    else ""
                )
                raise BadInput(
                    f"no calls of gRPC service {service!r}{hint}; known: {_listing(services)}"
                )
            if len(matches) > 1:
                raise BadInput(f"{service!r} is ambiguous: {', '.join(matches)}; name one in full")
            service = matches[0]
        if method and not ((pairs["service"] == service) & (pairs["method"] == method)).any():
            raise BadInput(f"no calls of {service}/{method}; known methods: {_listing(full)}")
    return service or None, method or None


def _short(service: str) -> str:
    """``predict.Predictor`` -> ``Predictor`` (the service without its package)."""
    return service.rsplit(".", 1)[-1]
