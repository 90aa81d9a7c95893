"""Bad input through the API, on both stores: each request gets a 4xx problem that says
what was wrong, never a 5xx, and nothing is stored (no run, event, signal or registry row).

Bodies are sent as raw bytes where JSON cannot say the wrong thing itself (NaN, lone
surrogates written as escapes, invalid UTF-8, a document nested 100,000 deep)."""

from __future__ import annotations

import base64
import json
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from api_helpers import PREFIX, Api, assert_problem
from conftest import Store

RUNS = f"{PREFIX}/runs"
TYPE = "content.thumbnail.v1"
YEAR_0 = "0001-01-01T00:00:00+14:00"
YEAR_10000 = "9999-12-31T23:59:59-14:00"
TABLES = ("workflow_run", "workflow_event", "workflow_signal", "workflow_registry")
JSON = {"content-type": "application/json"}


@pytest.fixture
def api(store: Store) -> Iterator[Api]:
    api = Api(store)
    yield api
    api.close()


@pytest.fixture
def unchanged(store: Store, api: Api) -> Iterator[str]:
    """A run to aim at; the test must leave every table as it found it."""
    run_id = api.start(TYPE)["id"]
    before = {table: store.count(table) for table in TABLES}
    yield run_id
    assert {table: store.count(table) for table in TABLES} == before


def raw(text: str) -> bytes:
    """A body as written, escapes and all (``json=`` would refuse or rewrite some)."""
    return text.encode("utf-8", "surrogatepass")


def start(fields: str) -> bytes:
    """A start request's body: the type, then ``fields`` as written."""
    return raw(f'{{"type": "{TYPE}", {fields}}}')


START_BODIES: list[tuple[str, bytes, int, str]] = [
    ("NUL in payload", start('"payload": {"a": "x\\u0000y"}'), 422, "NUL"),
    ("NUL in type", raw('{"type": "content.thumb\\u0000.v1"}'), 422, "invalid workflow type"),
    ("NUL in key", start('"idempotency_key": "k\\u0000"'), 422, "NUL"),
    ("surrogate", start('"payload": ["\\ud800"]'), 422, "lone surrogate"),
    ("surrogate key", start('"payload": {"\\udc00": 1}'), 422, "surrogate"),
    ("surrogate type", raw('{"type": "a.b\\ud800.v1"}'), 422, "invalid workflow type"),
    ("NaN", start('"payload": {"x": NaN}'), 400, "NaN"),
    ("Infinity", start('"payload": [Infinity]'), 400, "Infinity"),
    ("-Infinity", start('"delay": -Infinity'), 400, "-Infinity"),
    (
        "deep",
        start('"payload": ' + "[" * 100_000 + "]" * 100_000),
        400,
        "nested too deeply",
    ),
    (
        "deeper than its readers",  # a run the listing could not answer for
        start('"payload": ' + "[" * 600 + "]" * 600),
        422,
        "nested more than 512 levels deep",
    ),
    ("not JSON", b'{"type": ', 400, "not JSON"),
    ("not UTF-8", b'{"type": "\xff\xfe"}', 400, "not JSON"),
    ("huge integer", start('"payload": ' + "9" * 5000), 400, "not JSON"),
    ("unknown field", start('"colour": "red"'), 422, "colour"),
    ("no type", raw('{"payload": {}}'), 422, "type"),
    ("type not text", raw('{"type": 5}'), 422, "type"),
    ("priority as text", start('"priority": "5"'), 422, "priority"),
    ("priority as bool", start('"priority": true'), 422, "priority"),
    ("priority too big", start('"priority": 1099511627776'), 422, "priority"),
    ("attempts fraction", start('"max_attempts": 1.5'), 422, "max_attempts"),
    ("attempts zero", start('"max_attempts": 0'), 422, "max_attempts"),
    ("delay a list", start('"delay": []'), 422, "delay"),
    ("delay negative", start('"delay": -5'), 422, "delay"),
    ("delay unreadable", start('"delay": "soon"'), 422, "soon"),
    ("run_at naive", start('"run_at": "2030-01-01T00:00:00"'), 422, "run_at"),
    ("run_at text", start('"run_at": "tomorrow"'), 422, "run_at"),
    (
        "deadline naive",
        start('"deadline": "2030-01-01T09:00"'),
        422,
        "deadline",
    ),
    # Year 0 and year 10000 in UTC (issue 24): Postgres stored them, and every worker
    # that read such a run back died.
    ("run_at year 0", start(f'"run_at": "{YEAR_0}"'), 422, "run_at must be a time from 0002"),
    ("run_at year 10000", start(f'"run_at": "{YEAR_10000}"'), 422, "9998-12-31T23:59:59Z"),
    ("deadline year 0", start(f'"deadline": "{YEAR_0}"'), 422, "deadline must be a time"),
    ("deadline year 10000", start(f'"deadline": "{YEAR_10000}"'), 422, "deadline"),
    ("deadline 999999999d", start('"deadline": "999999999d"'), 422, "deadline must be at most"),
    ("deadline 1e300", start('"deadline": 1e300'), 422, "100 years"),
    ("delay 999999999d", start('"delay": "999999999d"'), 422, "delay must be at most 100 years"),
    (
        "debounce 999999999d",
        start('"debounce": {"key": "k", "window": "999999999d"}'),
        422,
        "debounce window must be at most 100 years",
    ),
    ("retention 999999999d", start('"retention": "999999999d"'), 422, "retention"),
    (
        "key too long",
        start(f'"idempotency_key": "{"k" * 600}"'),
        422,
        "idempotency_key",
    ),
    ("a list", b"[1, 2]", 422, "body"),
    ("empty", b"", 422, "body"),
]


@pytest.mark.parametrize(
    ("body", "status", "says"),
    [case[1:] for case in START_BODIES],
    ids=[case[0] for case in START_BODIES],
)
def test_a_bad_start_is_refused_and_stores_nothing(
    api: Api, unchanged: str, body: bytes, status: int, says: str
) -> None:
    assert_problem(api.post(RUNS, content=body, headers=JSON), status, says)


def test_a_bad_run_in_a_batch_refuses_the_batch(api: Api, unchanged: str) -> None:
    body = raw(f'{{"runs": [{{"type": "{TYPE}"}}, {{"type": "{TYPE}", "payload": "\\u0000"}}]}}')
    assert_problem(api.post(f"{RUNS}/batch", content=body, headers=JSON), 422, "NUL")
    body = raw(f'{{"runs": [{{"type": "{TYPE}"}}, {{"type": "{TYPE}", "extra": 1}}]}}')
    assert_problem(api.post(f"{RUNS}/batch", content=body, headers=JSON), 422, "extra")


@pytest.mark.parametrize(
    "option",
    [{"run_at": YEAR_0}, {"deadline": YEAR_10000}, {"deadline": "999999999d"}],
    ids=["run_at", "deadline", "deadline in"],
)
def test_a_run_out_of_range_in_a_batch_refuses_the_batch(
    api: Api, unchanged: str, option: dict[str, str]
) -> None:
    body = {"runs": [{"type": TYPE}, {"type": TYPE, **option}]}
    assert_problem(api.post(f"{RUNS}/batch", json=body), 422, next(iter(option)))


def test_bodies_over_the_limit_are_413(store: Store) -> None:
    api = Api(store, max_body_bytes=2000)
    try:
        baseline = store.count()
        big = {"type": TYPE, "payload": {"blob": "x" * 3000}}
        problem = assert_problem(api.post(RUNS, json=big), 413, "larger than 2000 bytes")
        assert problem["type"] == "urn:simpleworkflow:body-too-large"

        async def chunks() -> AsyncIterator[bytes]:  # no Content-Length: counted as it comes
            yield b'{"type": "%s", "payload": "' % TYPE.encode()
            for _ in range(10):
                yield b"x" * 500
            yield b'"}'

        assert_problem(api.post(RUNS, content=chunks(), headers=JSON), 413, "larger than")
        assert store.count() == baseline
    finally:
        api.close()


def test_a_payload_over_the_clients_limit_is_413(api: Api, unchanged: str) -> None:
    big = {"type": TYPE, "payload": {"blob": "x" * (1024 * 1024 + 1)}}
    problem = assert_problem(api.post(RUNS, json=big), 413, "the limit is 1048576 bytes")
    assert problem["type"] == "urn:simpleworkflow:payload-too-large"
    signal = {"event": "big", "payload": "x" * (1024 * 1024 + 1)}
    assert_problem(api.post(f"{RUNS}/{unchanged}/signals", json=signal), 413, "limit")


def test_moderately_deep_payloads_go_through_and_read_back(store: Store, api: Api) -> None:
    """Deeper than pydantic serializes (255), shallower than the JSON parser's limit."""
    deep: Any = "leaf"
    for _ in range(400):
        deep = [deep]
    run = api.start(TYPE, deep)
    assert api.get(f"{RUNS}/{run['id']}").json()["payload"] == deep


def test_the_deepest_payload_is_read_back_and_listed(store: Store, api: Api) -> None:
    """512 levels, the most a payload may nest: the API answers for the run wherever it
    shows it, the listing's two levels of wrapping included."""
    deepest: Any = "leaf"
    for _ in range(512):
        deepest = [deepest]
    run = api.start(TYPE, deepest)
    assert api.get(f"{RUNS}/{run['id']}").json()["payload"] == deepest
    listed = api.get(RUNS)
    assert listed.status_code == 200, listed.text
    assert [found["payload"] for found in listed.json()["runs"]] == [deepest]
    body = raw(f'{{"runs": [{{"type": "{TYPE}", "payload": {json.dumps(deepest)}}}]}}')
    assert api.post(f"{RUNS}/batch", content=body, headers=JSON).status_code == 201


SIGNAL_BODIES: list[tuple[str, bytes, int, str]] = [
    ("NUL in event", raw('{"event": "go\\u0000"}'), 422, "invalid event name"),
    ("bad event", raw('{"event": "not ok!"}'), 422, "invalid event name"),
    ("surrogate", raw('{"event": "go", "payload": "\\udfff"}'), 422, "lone surrogate"),
    ("NaN", raw('{"event": "go", "payload": NaN}'), 400, "NaN"),
    ("no event", raw('{"payload": 1}'), 422, "event"),
    ("unknown field", raw('{"event": "go", "when": 1}'), 422, "when"),
    ("event not text", raw('{"event": ["go"]}'), 422, "event"),
]


@pytest.mark.parametrize(
    ("body", "status", "says"),
    [case[1:] for case in SIGNAL_BODIES],
    ids=[case[0] for case in SIGNAL_BODIES],
)
def test_a_bad_signal_is_refused_and_stores_nothing(
    api: Api, unchanged: str, body: bytes, status: int, says: str
) -> None:
    response = api.post(f"{RUNS}/{unchanged}/signals", content=body, headers=JSON)
    assert_problem(response, status, says)


@pytest.mark.parametrize(
    ("body", "says"),
    [(raw('{"reason": "x\\u0000"}'), "NUL"), (raw('{"reason": 5}'), "reason")],
    ids=["NUL", "not text"],
)
def test_a_bad_cancel_reason_changes_nothing(
    api: Api, unchanged: str, body: bytes, says: str
) -> None:
    assert_problem(api.post(f"{RUNS}/{unchanged}/cancel", content=body, headers=JSON), 422, says)
    assert api.get(f"{RUNS}/{unchanged}").json()["status"] == "pending"


# A cursor as the API writes them, but for a time no store can compare with.
CURSOR_YEAR_0 = (
    base64.urlsafe_b64encode(json.dumps([YEAR_0, "01a21e01-7a54-7641-803e-0341340ee384"]).encode())
    .decode()
    .rstrip("=")
)
QUERIES: list[tuple[str, dict[str, Any], int, str]] = [
    ("payload not JSON", {"payload_contains": "{customer"}, 400, "payload_contains"),
    ("payload NaN", {"payload_contains": '{"x": NaN}'}, 400, "NaN"),
    ("payload NUL", {"payload_contains": '{"x": "\\u0000"}'}, 422, "NUL"),
    ("status", {"status": "running"}, 422, "status"),
    ("limit zero", {"limit": 0}, 422, "limit"),
    ("limit large", {"limit": 5000}, 422, "limit"),
    ("limit text", {"limit": "ten"}, 422, "limit"),
    ("since text", {"created_since": "yesterday"}, 422, "created_since"),
    ("since naive", {"created_since": "2030-01-01T00:00:00"}, 422, "created_since"),
    ("until naive", {"created_until": "2030-01-01"}, 422, "created_until"),
    ("since year 0", {"created_since": YEAR_0}, 422, "created_since must be a time from 0002"),
    ("until year 10000", {"created_until": YEAR_10000}, 422, "created_until must be a time"),
    ("cursor year 0", {"cursor": CURSOR_YEAR_0}, 422, "invalid cursor"),
    ("cursor", {"cursor": "garbage"}, 422, "invalid cursor"),
    ("cursor nested", {"cursor": "W1tb" * 100}, 422, "invalid cursor"),  # "[[[" * 100
    ("payload too large", {"payload_contains": json.dumps(list(range(300)))}, 422, "limit"),
    ("type NUL", {"type": "billing\x00"}, 422, "invalid type prefix"),
    ("type upper", {"type": "Billing.%"}, 422, "invalid type prefix"),
    ("deleted", {"include_deleted": "maybe"}, 422, "include_deleted"),
]


@pytest.mark.parametrize(
    ("params", "status", "says"),
    [case[1:] for case in QUERIES],
    ids=[case[0] for case in QUERIES],
)
def test_a_bad_listing_query_is_refused(
    api: Api, unchanged: str, params: dict[str, Any], status: int, says: str
) -> None:
    assert_problem(api.get(RUNS, params=params), status, says)


def test_bad_ids_and_type_names_in_paths(api: Api, unchanged: str) -> None:
    assert_problem(api.get(f"{RUNS}/%00"), 404, "run ids are UUIDs")
    assert_problem(api.get(f"{RUNS}/{'a' * 200}"), 422, "run_id")
    assert_problem(api.post(f"{RUNS}/%ED%A0%80/cancel"), 404, "run ids are UUIDs")
    assert_problem(api.post(f"{PREFIX}/types/a.b%00.v1/pause"), 422, "invalid workflow type")
    assert_problem(api.request("PATCH", RUNS), 405)


def _starts_to_compare() -> list[tuple[str, dict[str, Any]]]:
    """Starts of every kind of answer: created, held key, and each refusal."""
    body = json.dumps({"type": TYPE, "payload": {"n": 1}, "idempotency_key": "same"}).encode()

    async def chunks() -> AsyncIterator[bytes]:
        yield body[:10]
        yield body[10:]

    return [
        ("created", {"content": body, "headers": JSON}),
        ("the key held", {"content": body, "headers": JSON}),
        ("in chunks, no Content-Length", {"content": chunks(), "headers": JSON}),
        # A body of only a type and a payload is read without the request's model.
        ("a plain start", {"json": {"type": TYPE, "payload": [1, {"a": None, "é": "ü"}]}}),
        ("a type alone", {"json": {"type": TYPE}}),
        ("a null payload", {"json": {"type": TYPE, "payload": None}}),
        ("a payload and no type", {"json": {"payload": {}}}),
        ("a type not text", {"json": {"type": 5, "payload": {}}}),
        ("a bad type with a payload", {"json": {"type": "Bad Type", "payload": {}}}),
        ("an unknown field", {"json": {"type": TYPE, "colour": "red"}}),
        ("a string priority", {"json": {"type": TYPE, "priority": "5"}}),
        ("not an object", {"json": [TYPE]}),
        ("no body", {"headers": JSON}),
        ("NaN", {"content": raw('{"type": "a.b.v1", "payload": NaN}'), "headers": JSON}),
        ("not JSON", {"content": b'{"type": ', "headers": JSON}),
        ("a form", {"content": b"type=a.b.v1", "headers": {"content-type": "text/plain"}}),
        ("a bad type", {"json": {"type": "Bad Type"}}),
        ("a bad duration", {"json": {"type": TYPE, "deadline": "soon"}}),
        ("another site", {"json": {"type": TYPE}, "headers": {"origin": "https://evil.example"}}),
    ]


def test_a_start_gets_the_same_answer_from_the_app_as_from_the_router(store: Store) -> None:
    """``create_app`` answers ``POST /runs`` by a shorter way than the route that
    ``router()`` gives a user's app: every answer, a refusal or a start, is the same."""
    from fastapi import FastAPI

    from simpleworkflow.server import router

    def users_app(client: Any) -> FastAPI:
        app = FastAPI()
        app.include_router(router(client))
        return app

    answers: dict[str, list[tuple[int, Any]]] = {}
    for build in (None, users_app):
        api = Api(store, build=build)
        try:
            for case, request in _starts_to_compare():
                response = api.post(RUNS, **request)
                body = response.json()
                for volatile in ("id", "created_at", "updated_at", "run_at"):
                    if isinstance(body, dict) and volatile in body:
                        body[volatile] = "..."
                answers.setdefault(case, []).append((response.status_code, body))
        finally:
            api.close()
        store.sql("delete from workflow_event")  # so that the key is free again
        store.sql("delete from workflow_run")
    for case, (app_answer, router_answer) in answers.items():
        assert app_answer == router_answer, case
    assert [answers[case][0][0] for case in ("created", "the key held", "a bad type")] == [
        201, 200, 422,
    ]  # fmt: skip


def test_answers_are_written_as_the_standard_encoder_writes_them() -> None:
    """The answers' encoder, built once, writes what ``json.dumps`` does with the API's
    settings, and refuses what that refuses."""
    from simpleworkflow.server import bodies

    values: list[Any] = [
        {"a": [1, 2.5, None, True, False], "é": '\u2028"\\', "n": 10**30, "": {}},
        "text",
        [],
        {1: "integer key", 1.5: "float key", None: "null key"},
        json.loads("[" * 900 + "]" * 900),
    ]
    for value in values:
        expected = json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()
        assert bodies.respond(value).body == expected
    for bad in (float("nan"), {"x": float("inf")}, {(1,): 2}, {"x": object()}):
        with pytest.raises((ValueError, TypeError)):
            json.dumps(bad, allow_nan=False)
        with pytest.raises((ValueError, TypeError)):
            bodies.respond(bad)
