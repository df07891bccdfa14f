"""A query that reads a few phases computes only those: the same values, less analysis."""

from __future__ import annotations

import pytest

from grpc_overhead.analyzer.clock_offsets import query_parameters
from grpc_overhead.analyzer.insights.rows import rows_for
from grpc_overhead.analyzer.options import CallsOptions
from grpc_overhead.analyzer.phase_terms import phases_read
from grpc_overhead.analyzer.phases import DERIVED_PHASES, needed_phases, per_call_sql
from grpc_overhead.analyzer.result_columns import ALL_PHASES, CONSECUTIVE_PHASES
from tests.analyzer import seed
from tests.analyzer.seed import MS, Truth, module_store_fixture, store_fixture  # noqa: F401


@pytest.mark.unit
def test_a_derived_phase_brings_what_it_is_computed_from():
    assert needed_phases(["total"]) == {"total"}
    assert needed_phases(["network_overhead"]) == {"network_overhead", "total", "processing"}
    assert set(CONSECUTIVE_PHASES) <= needed_phases(["unattributed"])
    assert {"unattributed", "network_overhead", "request_network_corrected"} <= DERIVED_PHASES
    with pytest.raises(ValueError, match="unknown phases: nonsense"):
        needed_phases(["total", "nonsense"])


@pytest.mark.unit
def test_the_phases_a_query_reads_are_found_in_its_text():
    sql = "SELECT avgIf(total_value, unattributed_defined), sum(x_value), processing_us FROM t"
    assert phases_read(sql) == {"total", "unattributed"}
    assert phases_read("SELECT count() FROM t") == set()


@pytest.mark.e2e
@pytest.mark.parametrize("clock", [True, False])
def test_a_subset_has_the_values_of_every_phase_query(store, clock):
    truth = Truth(processing=3 * MS, request_network=250_000, response_network=180_000)
    for _ in range(3):
        seed.insert_spans(store, seed.synthetic_call(truth))
    parameters = query_parameters(None, None)
    wanted = ["unattributed", "network_overhead", "server_duration"]
    full = store.query(
        f"SELECT * FROM ({per_call_sql(CallsOptions(), clock=clock)}) ORDER BY TraceId",
        parameters,
    )
    subset = store.query(
        f"SELECT * FROM ({per_call_sql(CallsOptions(), clock=clock, phases=wanted)})"
        " ORDER BY TraceId",
        parameters,
    )
    assert len(full) == len(subset) == 3
    phase_columns = [c for c in subset.columns if c.rsplit("_", 1)[0] in ALL_PHASES]
    assert {c.rsplit("_", 1)[0] for c in phase_columns} == needed_phases(wanted)
    for column in [*phase_columns, "TraceId", "call_start_ns"]:
        assert subset[column].tolist() == full[column].tolist(), column
    # Computed one level up, the derived phases still add up (and are defined).
    assert subset["unattributed_defined"].all()
    assert (
        subset["network_overhead_value"] == full["total_value"] - full["processing_value"]
    ).all()
    # Columns other than phases are those of the full query, in its order.
    others = [c for c in full.columns if c.rsplit("_", 1)[0] not in ALL_PHASES]
    assert [c for c in subset.columns if c.rsplit("_", 1)[0] not in ALL_PHASES] == others


@pytest.mark.e2e
def test_rows_for_a_few_phases_reads_only_their_columns(store):
    seed.insert_spans(store, seed.synthetic_call(Truth(processing=2 * MS)))
    sql, bound = rows_for(store, None, phases=["total"])
    found = store.query(f"SELECT * FROM ({sql})", bound)
    assert len(found) == 1
    assert {"total_value", "total_defined"} <= set(found.columns)
    left_out = set(ALL_PHASES) - {"total"}
    assert not any(f"{name}_value" in found.columns for name in left_out)
