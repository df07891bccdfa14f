"""bench.analysis's reference: the same phase breakdown computed in pandas from loaded rows,
and how far the SQL answer is from it (the accuracy half of the analysis benchmark)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from grpc_overhead.analyzer.phase_bounds import CLOCK_FREE, ONE_WAY, REQUEST_GAP
from grpc_overhead.analyzer.result_columns import ALL_PHASES, STREAM_PHASES
from grpc_overhead.analyzer.store.base import Store

PANDAS_COLUMNS = (
    "service, method, call_type, client_host, server_host, client_start_ns, client_end_ns, "
    "server_start_ns, server_end_ns, client_outbound_message_ns, client_outbound_message_sent_ns, "
    "client_received_response_ns, client_received_response_last_ns, "
    "client_inbound_message_read_ns, server_call_started_ns, call_scheduled_ns, "
    "server_inbound_message_ns, server_inbound_message_read_ns, predictions_made_ns, "
    "server_outbound_message_ns, server_outbound_message_sent_ns, "
    "server_outbound_message_sent_last_ns, server_residence_ns, client_attempt_start_ns, "
    "request_created_ns, client_deadline_budget_ns, server_deadline_budget_ns, client_events"
)


def load_rows(store: Store) -> pd.DataFrame:
    return store.query(f"SELECT {PANDAS_COLUMNS} FROM grpc_calls FINAL")


def pandas_breakdown(rows: pd.DataFrame, window_ns: int = 60_000_000_000) -> pd.DataFrame:
    """What ``phase_breakdown`` computes, in pandas/numpy (exact quantiles, linear).

    ``server_dispatch`` needs both sides' deadline budgets (``analyzer.dispatch``: gRPC
    core's timeout encoding); the generated calls carry none, so it is undefined here as
    in SQL, and a store whose calls do carry budgets is refused rather than compared
    wrongly.
    """
    budgets = (rows["client_deadline_budget_ns"] > 0) & (rows["server_deadline_budget_ns"] > 0)
    if budgets.any():
        raise ValueError("pandas_breakdown has no server_dispatch: calls with deadline budgets")

    def between(later: str, earlier: str) -> pd.Series:
        a, b = rows[later].to_numpy(), rows[earlier].to_numpy()
        return pd.Series(np.where((a != 0) & (b != 0), a - b, np.nan))

    p: dict[str, pd.Series] = {
        "client_serialize": between(
            "client_outbound_message_sent_ns", "client_outbound_message_ns"
        ),
        "request_network": between("server_call_started_ns", "client_outbound_message_sent_ns"),
        "server_queue": between("server_inbound_message_ns", "server_call_started_ns"),
        "request_deserialize": between(
            "server_inbound_message_read_ns", "server_inbound_message_ns"
        ),
        "processing": between("predictions_made_ns", "server_inbound_message_read_ns"),
        "response_serialize": between(
            "server_outbound_message_sent_ns", "server_outbound_message_ns"
        ),
        "response_network": between(
            "client_received_response_ns", "server_outbound_message_sent_ns"
        ),
        "client_deserialize": between(
            "client_inbound_message_read_ns", "client_received_response_ns"
        ),
        "total": between("client_end_ns", "client_start_ns"),
    }
    residence = rows["server_residence_ns"].to_numpy()
    p["server_residence"] = between(
        "server_outbound_message_sent_last_ns", "server_call_started_ns"
    ).fillna(pd.Series(np.where(residence >= 0, residence, np.nan)))
    p["network_overhead"] = p["total"] - p["processing"]
    p["pool_wait"] = between("call_scheduled_ns", "server_call_started_ns")
    p["server_duration"] = between("server_end_ns", "server_start_ns")
    p["client_server_gap"] = p["total"] - p["server_duration"]

    # Offsets: per (client host, server host, window) the minimum-round-trip call.
    t1 = rows["client_outbound_message_sent_ns"].to_numpy()
    t2 = rows["server_call_started_ns"].to_numpy()
    t3 = rows["server_outbound_message_sent_last_ns"].to_numpy()
    t4 = rows["client_received_response_last_ns"].to_numpy()
    same = (rows["client_host"] == rows["server_host"]).to_numpy()
    window = (rows["client_start_ns"].to_numpy() // window_ns) * window_ns
    samples = pd.DataFrame(
        {
            "client_host": rows["client_host"],
            "server_host": rows["server_host"],
            "window": window,
            "offset": np.where(same, 0.0, ((t2 - t1) + (t3 - t4)) / 2),
            "rtt": np.where(same, 0, (t4 - t1) - (t3 - t2)),
        }
    )
    samples = samples[samples["rtt"] >= 0]
    keys = ["client_host", "server_host", "window"]
    best = samples.loc[samples.groupby(keys, observed=True)["rtt"].idxmin(), [*keys, "offset"]]
    offset = (
        pd.DataFrame(
            {
                "client_host": rows["client_host"],
                "server_host": rows["server_host"],
                "window": window,
            }
        )
        .merge(best, on=keys, how="left")["offset"]
        .to_numpy()
    )
    offset = np.where(same, 0.0, offset)
    p["request_network_raw"] = p["request_network"]  # no dispatch estimate to take off
    p["response_network_raw"] = p["response_network"]
    p["request_network"] = p["request_network_raw"] - offset  # the best estimates
    p["response_network"] = p["response_network_raw"] + offset
    # phase_bounds: the request gap for our clients only, no one-way phase negative on a
    # shared clock (before unattributed, which needs them).
    ours = rows["client_events"].to_numpy() == 1
    for name in REQUEST_GAP:
        p[name] = p[name].where(ours)
    for name in (
        "request_network",
        "request_network_raw",
        "response_network",
        "response_network_raw",
    ):
        p[name] = p[name].where(~(same & (p[name] < 0)))
    p["request_network_corrected"] = p["request_network"]
    p["response_network_corrected"] = p["response_network"]
    p["server_dispatch"] = pd.Series(np.full(len(rows), np.nan))
    # The eight consecutive phases (dispatch undefined counts as 0, as in SQL).
    consecutive = list(p)[:8]  # client_serialize ... client_deserialize, in order
    p["unattributed"] = p["total"] - sum(p[name] for name in consecutive)
    # The generated calls carry no interceptor-chain events and no mark: undefined, and
    # counted 0 in unattributed, as in SQL.
    p["server_interceptors"] = pd.Series(np.full(len(rows), np.nan))
    p["post_processing"] = pd.Series(np.full(len(rows), np.nan))

    def first_set(preferred: str, fallback: str) -> np.ndarray:
        a, b = rows[preferred].to_numpy(), rows[fallback].to_numpy()
        return np.where(a != 0, a, b)

    def span(later: np.ndarray, earlier: np.ndarray) -> pd.Series:
        return pd.Series(np.where((later != 0) & (earlier != 0), later - earlier, np.nan))

    column = {name: rows[name].to_numpy() for name in rows.columns}
    attempt = first_set("client_attempt_start_ns", "request_created_ns")
    server_read = first_set("server_inbound_message_read_ns", "server_inbound_message_ns")
    client_read = first_set("client_inbound_message_read_ns", "client_received_response_ns")
    received = first_set("client_received_response_ns", "client_inbound_message_read_ns")
    p["client_pre_send"] = span(column["client_outbound_message_sent_ns"], attempt)
    p["server_receive"] = span(server_read, column["server_call_started_ns"])
    p["server_handler"] = span(column["server_outbound_message_sent_ns"], server_read)
    p["server_tail"] = span(column["server_end_ns"], column["server_outbound_message_sent_last_ns"])
    p["request_receive"] = span(server_read, column["client_outbound_message_sent_ns"]) - offset
    p["response_receive"] = span(client_read, column["server_outbound_message_sent_ns"]) + offset
    sent = column["client_outbound_message_sent_ns"]
    started = np.where(ours, column["server_call_started_ns"], server_read)
    replied = column["server_outbound_message_sent_ns"]
    defined = (received != 0) & (sent != 0) & (replied != 0) & (started != 0)
    p["network_round_trip"] = pd.Series(
        np.where(defined, (received - sent) - (replied - started), np.nan)
    )

    for name in (*ONE_WAY, *CLOCK_FREE):
        p[name] = p[name].where(~((same | (name in CLOCK_FREE)) & (p[name] < 0)))
    # The generated calls are unary and carry no connection wait or lag probe: NULL, as in
    # SQL (these raised KeyError since issues 19-21 added them).
    for name in ("client_connect", "client_dispatch", *STREAM_PHASES):
        p[name] = pd.Series(np.full(len(rows), np.nan))
    frame = pd.DataFrame({name: p[name] for name in ALL_PHASES})
    frame["service"], frame["method"] = rows["service"].to_numpy(), rows["method"].to_numpy()
    grouped = frame.groupby(["service", "method"], observed=True)
    quantiles = grouped.quantile([0.5, 0.9, 0.99])  # index (service, method, q)
    return pd.concat([quantiles, grouped.mean().assign(q="mean").set_index("q", append=True)])


def agreement(sql: pd.DataFrame, pandas: pd.DataFrame) -> dict[str, float]:
    """Largest relative difference between the SQL and pandas results, per statistic
    (over every method and phase whose values are not tiny)."""
    worst: dict[str, float] = {}
    for statistic, q in (("mean_us", "mean"), ("p50_us", 0.5), ("p90_us", 0.9), ("p99_us", 0.99)):
        differences = []
        for row in sql.itertuples(index=False):
            expected = pandas.loc[(row.service, row.method, q), row.phase] / 1000
            value = getattr(row, statistic)
            if abs(expected) > 1:  # µs; relative error means little near zero
                differences.append(abs(value - expected) / abs(expected))
        worst[statistic] = round(max(differences), 5)
    return worst


# -- run ---------------------------------------------------------------------------------------
