"""``payload_contains``: bounded on both stores, and SQLite's matcher means ``jsonb @>``
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
from simpleworkflow.backends.sqlite import matching
from simpleworkflow.client import _listing

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
