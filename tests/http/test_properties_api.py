"""Properties of the HTTP API, in-process on both stores, over generated bodies and query
parameters (tests/property_strategies.py): every answer is either a 4xx problem document
with nothing stored, or a success whose run (or signal) reads back as it was sent; never
a 5xx."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

import property_strategies as gen
import pytest
from api_helpers import PREFIX, Api
from conftest import Store
from hypothesis import assume, event, given
from hypothesis import strategies as st
from test_properties_start import same_json

RUNS = f"{PREFIX}/runs"
TABLES = ("workflow_run", "workflow_signal", "workflow_event")


@pytest.fixture
def api(store: Store) -> Iterator[Api]:
    api = Api(store)
    yield api
    api.close()


def body_text(document: Any) -> bytes:
    """A body as a client in another language may write it: NaN and Infinity as such,
    lone surrogates as escapes. Integers too long for Python to write, and documents too
    deep for its encoder, are left out (tests/test_api_input.py sends those as text)."""
    try:
        text = json.dumps(document, allow_nan=True)
    except (ValueError, RecursionError):
        assume(False)
    return text.encode()


json_durations = st.one_of(
    gen.duration_texts,
    st.integers(-10, 10**13),
    st.floats(),
    st.sampled_from([True, [], {}, None]),
)

debounce_bodies = st.one_of(
    st.fixed_dictionaries(
        {"key": gen.odd_text, "window": json_durations}, optional={"max_wait": json_durations}
    ),
    st.sampled_from([["k", "1s"], "k", {"key": "k"}]),
)

start_bodies = st.fixed_dictionaries(
    {"type": st.one_of(gen.type_names, st.sampled_from([None, 5, ["a.b.v1"]]))},
    optional={
        "payload": gen.json_values,
        "idempotency_key": st.one_of(st.none(), gen.odd_text, st.just(5)),
        "priority": gen.integers_of_options,
        "delay": json_durations,
        "run_at": st.one_of(st.none(), gen.time_texts, st.just(0)),
        "max_attempts": gen.integers_of_options,
        "deadline": st.one_of(json_durations, gen.time_texts),
        "retention": json_durations,
        "concurrency_key": st.one_of(st.none(), gen.odd_text),
        "debounce": debounce_bodies,
        "colour": st.just("red"),
    },
)

plausible_bodies = st.fixed_dictionaries(
    {"type": gen.valid_types},
    optional={
        "payload": gen.plausible_payloads,
        "priority": st.integers(-(2**31) + 1, 2**31 - 1),
        "delay": st.integers(0, 10**6),
        "max_attempts": st.integers(1, 10_000),
        "deadline": st.sampled_from(["1h", "30d", 3600]),
        "concurrency_key": gen.plain_text,
        "idempotency_key": gen.plain_text,
    },
)


def counts(store: Store) -> dict[str, int]:
    return {table: store.count(table) for table in TABLES}


def is_problem(response: Any) -> bool:
    body = response.json()
    return (
        response.headers["content-type"] == "application/problem+json"
        and body["status"] == response.status_code
        and bool(body["detail"])
    )


def started_or_refused(store: Store, api: Api, body: bytes) -> str:
    """The property for one start request; returns what came of it."""
    before = counts(store)
    response = api.post(RUNS, content=body, headers={"content-type": "application/json"})
    assert response.status_code < 500, response.text
    if response.status_code >= 400:
        assert is_problem(response), response.text
        assert counts(store) == before, f"{response.status_code} but something was stored"
        return f"{response.status_code}"
    assert response.status_code in (200, 201), response.text
    started = response.json()
    sent = json.loads(body)
    read = api.get(f"{RUNS}/{started['id']}").json()
    assert same_json(read["payload"], started["payload"])
    if started["created"] or sent.get("debounce") is not None:
        assert same_json(started["payload"], gen.as_read_back(sent.get("payload")))
    return "stored"


EDGE_BODIES = [
    {"type": "prop.api.v1", "run_at": "0001-01-01T00:00:00+14:00"},
    {"type": "prop.api.v1", "run_at": "9999-12-31T23:59:59.999999-14:00"},
    {"type": "prop.api.v1", "deadline": "0001-01-01T00:00:00+14:00"},
    {"type": "prop.api.v1", "deadline": "999999999d"},
    {"type": "prop.api.v1", "delay": 1e300},
    {"type": "prop.api.v1", "retention": "999999999d"},
    {"type": "prop.api.v1", "debounce": {"key": "k", "window": "999999999d"}},
    {"type": "prop.api.v1", "payload": {"f": [1e16, 1e300]}},
]


def test_starts_at_the_edges_are_refused_or_stored(store: Store, api: Api) -> None:
    broken = []
    for body in EDGE_BODIES:
        try:
            started_or_refused(store, api, json.dumps(body).encode())
        except Exception as exc:  # what escapes the app is a 500 from a real server
            broken.append(f"{body}: {type(exc).__name__}: {str(exc)[:200]}")
    assert not broken, "\n".join(broken)


@gen.bounded(40)
@given(body=start_bodies)
def test_a_start_request_is_refused_whole_or_stored_as_sent(
    store: Store, api: Api, body: dict[str, Any]
) -> None:
    event(started_or_refused(store, api, body_text(body)))


@gen.bounded(25)
@given(body=plausible_bodies)
def test_a_plausible_start_request_is_stored_as_sent(
    store: Store, api: Api, body: dict[str, Any]
) -> None:
    event(started_or_refused(store, api, body_text(body)))


@gen.bounded(30)
@given(event_name=st.one_of(gen.event_names, st.just(5)), payload=gen.json_values)
def test_a_signal_is_refused_whole_or_stored_as_sent(
    store: Store, api: Api, event_name: Any, payload: Any
) -> None:
    run_id = api.start("prop.signals.v1", {})["id"]
    before = counts(store)
    body = body_text({"event": event_name, "payload": payload})
    response = api.post(
        f"{RUNS}/{run_id}/signals", content=body, headers={"content-type": "application/json"}
    )
    assert response.status_code < 500, response.text
    if response.status_code >= 400:
        assert is_problem(response), response.text
        assert counts(store) == before
        event(str(response.status_code))
        return
    event("stored")
    signals = api.get(f"{RUNS}/{run_id}/signals").json()
    assert [s["event"] for s in signals] == [event_name]
    assert same_json(signals[0]["payload"], gen.as_read_back(payload))


def query_text(params: dict[str, Any]) -> str:
    """A query string as a browser or a script may send it: UTF-8, percent-encoded, lone
    surrogates as the bytes ``surrogatepass`` makes of them (not UTF-8)."""
    parts = []
    for name, values in params.items():
        for value in values if isinstance(values, list) else [values]:
            text = str(value).encode("utf-8", "surrogatepass")
            parts.append(f"{name}={quote(text, safe='')}")
    return "&".join(parts)


def cursor_of(value: Any) -> str:
    """A cursor as a client could forge it: base64 of any JSON."""
    try:
        return b64(json.dumps(value, allow_nan=True))
    except (ValueError, RecursionError):
        return b64("[" * 20000 + "]" * 20000)


cursors = st.one_of(gen.odd_text, gen.json_values.map(cursor_of))

list_queries = st.fixed_dictionaries(
    {},
    optional={
        "type": st.one_of(gen.odd_text, st.sampled_from(["prop.%", "prop.list.v1", "%"])),
        "status": st.lists(
            st.one_of(gen.odd_text, st.sampled_from(["pending", "sleeping", "throttled"])),
            max_size=3,
        ),
        "created_after": gen.time_texts,
        "created_before": gen.time_texts,
        "payload_contains": st.one_of(
            gen.odd_text, gen.json_values.map(lambda v: json.dumps(v, allow_nan=True))
        ),
        "include_deleted": st.one_of(gen.odd_text, st.sampled_from(["true", "0", "yes"])),
        "limit": st.one_of(gen.odd_text, st.integers().map(str), st.just("1000")),
        "cursor": cursors,
    },
)


def b64(text: str) -> str:
    return base64.urlsafe_b64encode(text.encode()).decode()


#: Listing queries at the edges, each tried on every run.
EDGE_QUERIES: list[dict[str, Any]] = [
    {"payload_contains": "[" * 5000 + "]" * 5000},
    {"payload_contains": json.dumps(gen.nested(900, "dict"))},
    {"payload_contains": json.dumps(list(range(3000)))},
    {"payload_contains": json.dumps({f"k{n}": [n, "x"] for n in range(1000)})},
    {"created_after": "0001-01-01T00:00:00+14:00"},
    {"created_before": "9999-12-31T23:59:59.999999-14:00"},
    {"cursor": b64("[]")},
    {"cursor": b64("[" * 20000 + "]" * 20000)},
    {"cursor": b64('["9999-12-31T23:59:59-14:00", "x"]')},
    {"cursor": "x" * 5000},
]


def test_listings_at_the_edges_answer_a_page_or_a_problem(store: Store, api: Api) -> None:
    broken = []
    for params in EDGE_QUERIES:
        try:
            listed(store, api, params)
        except Exception as exc:
            broken.append(f"{str(params)[:80]}: {type(exc).__name__}: {str(exc)[:200]}")
    assert not broken, "\n".join(broken)


@gen.bounded(50)
@given(params=list_queries)
def test_a_listing_answers_a_page_or_a_problem(
    store: Store, api: Api, params: dict[str, Any]
) -> None:
    try:
        query_text(params)
    except ValueError:  # an int past 4300 digits
        assume(False)
    assume(len(query_text(params)) < 60_000)  # httpx sends no longer URL
    event(listed(store, api, params))


def listed(store: Store, api: Api, params: dict[str, Any]) -> str:
    """The property for one listing; returns what came of it."""
    if store.count() == 0:
        for n in range(3):
            api.start("prop.list.v1", {"n": n, "tags": ["a", n]})
    response = api.get(f"{RUNS}?{query_text(params)}")
    assert response.status_code < 500, response.text
    if response.status_code >= 400:
        assert is_problem(response), response.text
        return str(response.status_code)
    page = response.json()
    assert isinstance(page["runs"], list) and len(page["runs"]) <= 1000
    return "page"
