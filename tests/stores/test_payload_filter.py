"""``payload_contains``: bounded on both stores, served on Postgres by an index an
operator creates (``Admin.create_payload_index``), and SQLite's matcher means ``jsonb @>``
at a cost that does not grow with the filter times the payload.

SQLite matches in Python (``backends/sqlite/matching.py``), for every row a listing
reads and under the store's lock: a filter of 1,000 elements against a payload of 10,000
once held every other request for 5.6 s. The client refuses a filter past its bounds
(the API answers 422), and the matcher looks each element up in an index of the array.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from api_helpers import PREFIX, Api, assert_problem
from conftest import Store
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_dashboard import Dash

from simpleworkflow import Client, errors
from simpleworkflow.admin import Admin
from simpleworkflow.backends import Backend, postgres, queries, sqlite
from simpleworkflow.backends.sqlite import matching
from simpleworkflow.client import _listing
from simpleworkflow.models import PayloadIndex

TYPE = "shop.order.v1"
MAX_VALUES = _listing.MAX_FILTER_VALUES


def test_a_filter_past_its_bounds_is_refused_naming_the_bound(store: Store, client: Client) -> None:
    client.start(TYPE, {"tags": list(range(1000))})
    too_many = {"tags": list(range(1000))}
    deep: Any = "x"
    for _ in range(_listing.MAX_FILTER_DEPTH + 1):
        deep = {"a": deep}
    for pattern, words in (
        (too_many, f"the limit is {MAX_VALUES}"),
        (deep, f"more than {_listing.MAX_FILTER_DEPTH} deep"),
        ({"s": "x" * (_listing.MAX_FILTER_BYTES + 1)}, f"{_listing.MAX_FILTER_BYTES} bytes"),
    ):
        with pytest.raises(errors.InvalidArgument, match="payload_contains") as refused:
            client.list(payload_contains=pattern)
        assert words in str(refused.value)
    api = Api(store)
    try:
        problem = assert_problem(
            api.get(f"{PREFIX}/runs", params={"payload_contains": json.dumps(too_many)}),
            422,
            "payload_contains",
            f"the limit is {MAX_VALUES}",
        )
        assert problem["type"] == "urn:simpleworkflow:invalid-argument"
    finally:
        api.close()
    dash = Dash(store)
    try:
        page = dash.get("/runs", params={"payload": json.dumps(too_many)})
    finally:
        dash.close()
    assert page.status_code == 422 and f"the limit is {MAX_VALUES}" in page.text
    # The largest filter allowed is served.
    allowed = {"tags": list(range(MAX_VALUES - 2))}
    assert len(client.list(payload_contains=allowed).runs) == 1


def test_a_large_allowed_filter_finds_its_runs_in_large_payloads(client: Client) -> None:
    big = [f"tag-{n}" for n in range(10_000)]
    objects = [{"sku": f"s{n}", "qty": n % 7} for n in range(5_000)]
    match = client.start(TYPE, {"tags": big, "lines": objects}).id
    client.start(TYPE, {"tags": big[:-1], "lines": objects})  # lacks the last tag
    client.start(TYPE, {"tags": "not an array", "lines": objects})
    wanted = big[-80:] + big[:80]
    lines = [{"sku": f"s{n}", "qty": n % 7} for n in range(0, 5_000, 200)]  # 25 objects
    pattern = {"tags": wanted, "lines": lines}
    assert [run.id for run in client.list(payload_contains=pattern).runs] == [match]
    assert client.list(payload_contains={"lines": [{"sku": "s1", "qty": 2}]}).runs == []


def test_the_matchers_work_does_not_grow_with_filter_times_payload(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each element of the filter is a lookup: comparisons stay near the filter's size,
    where the plain definition compares every pair (over a million here)."""
    calls = 0
    plain = matching.contains

    def counted(doc: Any, pattern: Any, *, top: bool = True) -> bool:
        nonlocal calls
        calls += 1
        return plain(doc, pattern, top=top)

    monkeypatch.setattr(matching, "contains", counted)
    doc = {
        "tags": [f"tag-{n}" for n in range(10_000)],
        "lines": [{"sku": f"s{n}", "qty": n} for n in range(10_000)],
        "pairs": [[n, n + 1] for n in range(10_000)],
    }
    pattern = {
        "tags": [f"tag-{n}" for n in range(0, 10_000, 200)],
        "lines": [{"sku": f"s{n}"} for n in range(0, 10_000, 200)],
        "pairs": [[n + 1] for n in range(0, 10_000, 500)],
    }
    assert matching.contains_json(json.dumps(doc), json.dumps(pattern)) == 1
    assert calls < 10 * MAX_VALUES, calls
    calls = 0
    missing = {"lines": [{"sku": f"t{n}"} for n in range(120)]}
    assert matching.contains_json(json.dumps(doc), json.dumps(missing)) == 0
    assert calls < 10 * MAX_VALUES, calls


# -- the listing with a filter: its own statement, an index on Postgres ------------------


@pytest.mark.parametrize("package", [postgres.__name__, sqlite.__name__])
def test_the_filtered_listing_is_the_listing_plus_the_filter(package: str) -> None:
    """``list_runs_containing`` may drift from ``list_runs`` in nothing but the filter."""
    statements = queries.load(package, "queries.sql", '"workflow"')

    def lines(name: str) -> list[str]:
        text = statements[name].splitlines()
        return [line for line in text if not line.lstrip().startswith("--")]

    plain, containing = lines("list_runs"), lines("list_runs_containing")
    added = [line for line in containing if "payload" in line]
    assert len(added) == 1 and "payload_contains" in added[0] and " or " not in added[0]
    assert [line for line in containing if line not in added] == plain


def test_a_filtered_listing_pages_through_its_runs_with_the_other_filters(
    client: Client,
) -> None:
    """The filtered statement keeps every other filter and the cursor's order."""
    wanted = [client.start(TYPE, {"customer": "c_1", "n": n}).id for n in range(7)]
    client.start(TYPE, {"customer": "c_2"})
    client.start("shop.refund.v1", {"customer": "c_1"})
    cancelled = client.start(TYPE, {"customer": "c_1", "n": 99}).id
    client.cancel(cancelled)
    seen: list[str] = []
    cursor = None
    while True:
        page = client.list(
            type_prefix="shop.order.",
            status="pending",
            payload_contains={"customer": "c_1"},
            limit=3,
            cursor=cursor,
        )
        seen += [run.id for run in page.runs]
        if page.next_cursor is None:
            break
        cursor = page.next_cursor
    assert seen == wanted[::-1]  # newest first, each once
    found = client.list(status="cancelled", payload_contains={"customer": "c_1"}).runs
    assert [run.id for run in found] == [cancelled]


#: Runs beside which the planner prefers the payload index to reading runs in order.
PLANNED_RUNS = 20_000


def _plan(store: Store, backend: Backend, **filters: Any) -> str:
    """The plan of the listing statement the client sends for these filters."""
    statement = next(backend.list_runs(_listing.list_query(**{**_NO_FILTER, **filters})))
    with psycopg.connect(store.url) as conn:
        rows = conn.execute(("explain " + statement.sql).encode(), statement.params).fetchall()
    return "\n".join(row[0] for row in rows)


_NO_FILTER: dict[str, Any] = {
    "type_prefix": None,
    "status": None,
    "created_after": None,
    "created_before": None,
    "include_deleted": False,
    "limit": 50,
    "cursor": None,
}


def test_a_payload_filter_is_served_by_the_payload_index_on_postgres(
    store: Store, backend: Backend, client: Client
) -> None:
    if store.kind != "postgres":
        pytest.skip("a Postgres plan")
    for start in range(0, PLANNED_RUNS, 5_000):
        client.start_many(
            [(TYPE, {"customer": f"c_{n % 2_000}", "n": n}) for n in range(start, start + 5_000)]
        )
    store.sql(
        "update workflow_run set status = 'succeeded' where mod((payload ->> 'n')::int, 3) = 0"
    )
    with psycopg.connect(store.url, autocommit=True) as conn:  # as autovacuum would
        conn.execute(f'vacuum (analyze) "{store.schema}".workflow_run'.encode())
    # No index unless an operator made one: every run's writes would pay for it.
    assert "idx_workflow_run_payload" not in _plan(store, backend, payload_contains={"c": 1})
    with Admin(store.url, schema=store.schema) as admin:
        created = admin.create_payload_index()
    assert (created.present, created.valid, created.changed) == (True, True, True)
    assert created.size_bytes > 0
    cursor = client.list(payload_contains={"customer": "c_7"}, limit=3).next_cursor
    wanted = {"payload_contains": {"customer": "c_7"}}
    for filters in (
        {},
        {"status": "pending"},
        {"status": ["succeeded", "sleeping", "retrying"]},
        {"type_prefix": "shop."},
        {"include_deleted": True},
        {"cursor": cursor, "limit": 3},
    ):
        plan = _plan(store, backend, **wanted, **filters)
        assert "Bitmap Index Scan on idx_workflow_run_payload" in plan, (filters, plan)
        assert "Seq Scan" not in plan, (filters, plan)
    # What the index finds is what the filter means: c_7's ten runs, newest first.
    found = client.list(payload_contains={"customer": "c_7"}, status="pending").runs
    expected = [n for n in range(PLANNED_RUNS - 1, -1, -1) if n % 2_000 == 7 and n % 3]
    assert [run.payload["n"] for run in found] == expected
    # Without the filter the listing still reads runs newest first, as it did.
    plan = _plan(store, backend)
    assert "idx_workflow_run_payload" not in plan and "Seq Scan" not in plan, plan
    # Dropped, the index serves nothing, and the listing finds the same runs without it.
    with Admin(store.url, schema=store.schema) as admin:
        assert admin.drop_payload_index().changed
        assert not admin.payload_index().present
    assert "idx_workflow_run_payload" not in _plan(store, backend, **wanted)
    again = client.list(payload_contains={"customer": "c_7"}, status="pending").runs
    assert [run.payload["n"] for run in again] == expected


def test_the_payload_index_is_idempotent_and_rebuilt_when_a_build_was_interrupted(
    store: Store, client: Client
) -> None:
    if store.kind != "postgres":
        pytest.skip("a Postgres index")
    client.start(TYPE, {"customer": "c_1"})
    with Admin(store.url, schema=store.schema) as admin:
        assert admin.payload_index() == PayloadIndex(present=False, valid=False, size_bytes=0)
        assert not admin.drop_payload_index().changed  # absent: nothing to do
        assert admin.create_payload_index().changed
        twice = admin.create_payload_index()
        assert (twice.present, twice.valid, twice.changed, twice.rebuilt) == (
            True,
            True,
            False,
            False,
        )
        assert admin.drop_payload_index().changed
        # A concurrent build cut short (here by its statement timeout, while it waits for
        # a writer's transaction) leaves an invalid index behind, which serves nothing.
        table = f'"{store.schema}".workflow_run'
        with (
            psycopg.connect(store.url) as writer,
            psycopg.connect(store.url, autocommit=True) as builder,
        ):
            writer.execute(f"update {table} set priority = priority".encode())
            builder.execute(b"set statement_timeout = '500ms'")
            with pytest.raises(psycopg.errors.QueryCanceled):
                builder.execute(
                    f"create index concurrently idx_workflow_run_payload on {table} "
                    "using gin (payload jsonb_path_ops)".encode()
                )
            writer.rollback()
        left = admin.payload_index()
        assert (left.present, left.valid) == (True, False)
        rebuilt = admin.create_payload_index()
        assert (rebuilt.present, rebuilt.valid, rebuilt.changed, rebuilt.rebuilt) == (
            True,
            True,
            True,
            True,
        )
        assert admin.drop_payload_index().changed


def test_sqlite_has_no_payload_index_and_says_so(store: Store) -> None:
    if store.kind != "sqlite":
        pytest.skip("what SQLite answers")
    with Admin(store.url) as admin:
        for call in (admin.payload_index, admin.create_payload_index, admin.drop_payload_index):
            with pytest.raises(errors.ConfigurationError, match="sqlite store has no such index"):
                call()


# -- the matcher means jsonb @> ---------------------------------------------------------

_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-3, 3),
    st.sampled_from([1.0, 2.5, -0.0]),
    st.sampled_from(["a", "b", ""]),
)
_JSON = st.recursive(
    _SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.sampled_from("abc"), inner, max_size=3)
    ),
    max_leaves=12,
)


@pytest.fixture(scope="module")
def postgres(postgres_url: str) -> Iterator[psycopg.Connection[Any]]:
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        yield conn


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(doc=_JSON, pattern=_JSON, part=st.booleans())
def test_the_sqlite_matcher_agrees_with_postgres(
    postgres: psycopg.Connection[Any], doc: Any, pattern: Any, part: bool
) -> None:
    if part and isinstance(doc, list | dict) and doc:  # often a pattern that is a part
        pattern = doc[0] if isinstance(doc, list) else {k: doc[k] for k in list(doc)[:1]}
    row = postgres.execute(
        "select %s::jsonb @> %s::jsonb", (json.dumps(doc), json.dumps(pattern))
    ).fetchone()
    assert row is not None
    assert matching.contains_json(json.dumps(doc), json.dumps(pattern)) == int(row[0]), (
        doc,
        pattern,
    )
