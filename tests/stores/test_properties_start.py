"""Properties of starting a run, on both stores, over generated types, payloads and start
options (tests/property_strategies.py): a start either raises a typed error and stores
nothing, or stores the run so that the client, the HTTP API and the CLI read back the
same run, with the payload as given."""

from __future__ import annotations

import enum
import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta, timezone
from decimal import Decimal
from typing import Any

import property_strategies as gen
import pytest
from api_helpers import PREFIX, Api
from conftest import Store
from hypothesis import event, given
from hypothesis import strategies as st

from simpleworkflow import Client, cli, errors
from simpleworkflow.codec import Codec
from simpleworkflow.models import Run

TYPE = "prop.start.v1"


@pytest.fixture
def api(store: Store) -> Iterator[Api]:
    api = Api(store)
    yield api
    api.close()


def same_json(got: Any, want: Any) -> bool:
    """JSON equality, with numbers equal by value (Postgres ``jsonb`` writes ``1e16`` as
    ``10000000000000000``) but a number never equal to a boolean. A loop, not recursion:
    payloads may be nested as deep as the encoder allows."""
    pending = [(got, want)]
    while pending:
        a, b = pending.pop()
        if isinstance(a, bool) or isinstance(b, bool):
            same = a is b
        elif isinstance(a, int | float) and isinstance(b, int | float):
            same = a == b
        elif isinstance(a, dict) and isinstance(b, dict):
            same = a.keys() == b.keys()
            pending.extend((a[key], b[key]) for key in b if same)
        elif isinstance(a, list) and isinstance(b, list):
            same = len(a) == len(b)
            pending.extend(zip(a, b, strict=False))
        else:
            same = type(a) is type(b) and a == b
        if not same:
            return False
    return True


def readable_everywhere(store: Store, client: Client, api: Api, run: Run) -> None:
    """The run as ``start`` returned it is what the client, the API and the CLI read."""
    again = client.get(run.id)
    assert again.id == run.id and again.created_at == run.created_at
    assert same_json(again.payload, run.payload)
    expected = json.loads(json.dumps(again.to_dict()))
    response = api.get(f"{PREFIX}/runs/{run.id}")
    assert response.status_code == 200, response.text
    served = response.json()
    for field in ("id", "type", "priority", "idempotency_key", "max_attempts", "concurrency_key"):
        assert served[field] == expected[field], field
    assert same_json(served["payload"], expected["payload"])
    for field in ("run_at", "deadline"):
        assert moment(served[field]) == moment(expected[field]), field
    code = cli.main(["-d", store.url, "--schema", store.schema, "runs", "show", run.id, "--json"])
    assert code == 0
    # show prints the run read back; the CLI's own stdout is read by the caller's capsys.


def moment(text: str | None) -> datetime | None:
    return None if text is None else datetime.fromisoformat(text.replace("Z", "+00:00"))


def start_or_refuse(client: Client, type_name: Any, payload: Any, options: dict[str, Any]) -> Any:
    """``client.start(...)``: the run, or the typed error it raised."""
    try:
        return client.start(type_name, payload, **options)
    except errors.InvalidInput as exc:
        return exc


EDGE = gen.EARLIEST
LAST = gen.LATEST


#: Inputs at the edges the generated ones reach only by luck, each tried on every run.
EDGE_STARTS: list[tuple[Any, dict[str, Any]]] = [
    (None, {"run_at": EDGE}),
    (None, {"run_at": LAST}),
    (None, {"deadline": EDGE}),
    (None, {"deadline": LAST}),
    (None, {"deadline": "999999999d"}),
    (None, {"delay": "99999999999999w"}),
    (None, {"retention": "999999999d"}),
    (None, {"debounce": ("k", "999999999d")}),
    (None, {"debounce": {"key": "k", "window": "1s", "max_wait": 10**18}}),
    ([gen.nested(990, "list")], {}),
    ({"n": 10**4299, "m": -(2**63) - 1, "f": 5e-324, "g": 1.7976931348623157e308}, {}),
    ("x" * (1024 * 1024 - 2), {}),
    ("x" * (1024 * 1024 - 1), {}),
]


def test_starts_at_the_edges_are_refused_whole_or_stored_as_given(
    store: Store, client: Client, api: Api, capsys: pytest.CaptureFixture[str]
) -> None:
    """Every edge is tried, and every one that breaks the property is named."""
    broken = []
    for number, (payload, options) in enumerate(EDGE_STARTS):
        try:
            refused_whole_or_stored_as_given(store, client, api, capsys, TYPE, payload, options)
        except Exception as exc:
            broken.append(f"#{number} {str(options)[:60]}: {type(exc).__name__}: {exc}"[:300])
    assert not broken, "\n".join(broken)


@gen.bounded(40)
@given(type_name=gen.type_names, payload=gen.payloads, options=gen.start_options)
def test_an_odd_start_is_refused_whole_or_stored_as_given(
    store: Store,
    client: Client,
    api: Api,
    capsys: pytest.CaptureFixture[str],
    type_name: Any,
    payload: Any,
    options: dict[str, Any],
) -> None:
    event(refused_whole_or_stored_as_given(store, client, api, capsys, type_name, payload, options))


@gen.bounded(30)
@given(type_name=gen.valid_types, payload=gen.plausible_payloads, options=gen.plausible_options)
def test_a_plausible_start_is_stored_as_given(
    store: Store,
    client: Client,
    api: Api,
    capsys: pytest.CaptureFixture[str],
    type_name: Any,
    payload: Any,
    options: dict[str, Any],
) -> None:
    event(refused_whole_or_stored_as_given(store, client, api, capsys, type_name, payload, options))


def refused_whole_or_stored_as_given(
    store: Store,
    client: Client,
    api: Api,
    capsys: pytest.CaptureFixture[str],
    type_name: Any,
    payload: Any,
    options: dict[str, Any],
) -> str:
    """The property, for one start; returns what came of it (for Hypothesis's statistics)."""
    before = store.count()
    outcome = start_or_refuse(client, type_name, payload, options)
    if isinstance(outcome, errors.InvalidInput):
        assert str(outcome)
        assert store.count() == before, f"{outcome!r} but a run was stored"
        return type(outcome).__name__
    run: Run = outcome
    fresh = run.created or options.get("debounce") is not None
    if fresh:
        assert same_json(run.payload, gen.as_read_back(payload))
        assert run.type == type_name
        assert run.priority == options.get("priority", 100)
        assert run.max_attempts == (options.get("max_attempts") or 3)
        assert run.concurrency_key == options.get("concurrency_key")
        if isinstance(options.get("run_at"), datetime):
            assert abs(run.run_at - options["run_at"]) <= timedelta(milliseconds=1)
    readable_everywhere(store, client, api, run)
    shown = json.loads(capsys.readouterr().out)["run"]
    assert shown == json.loads(json.dumps(client.get(run.id).to_dict()))
    return "stored" if fresh else "found"


@gen.bounded(25)
@given(
    requests=st.lists(
        st.one_of(
            st.tuples(gen.type_names, gen.payloads),
            st.fixed_dictionaries({"type": gen.type_names, "payload": gen.payloads}).flatmap(
                lambda base: gen.start_options.map(lambda options: {**base, **options})
            ),
        ),
        min_size=1,
        max_size=4,
    )
)
def test_a_batch_is_refused_whole_or_stored_as_given(
    store: Store, client: Client, requests: list[Any]
) -> None:
    before = store.count()
    try:
        runs = client.start_many(requests)
    except errors.InvalidInput:
        assert store.count() == before
        return
    assert len(runs) == len(requests)
    for run, request in zip(runs, requests, strict=True):
        payload = request[1] if isinstance(request, tuple) else request.get("payload")
        if run.created:
            assert same_json(run.payload, gen.as_read_back(payload))
        assert client.get(run.id) == run


# -- typed payloads through a codec ------------------------------------------------------


class Kind(enum.Enum):
    A = "a"
    B = 2


@dataclass(frozen=True)
class Typed:
    """A payload of the types a codec writes, nested in a dataclass."""

    when: datetime
    day: date
    amount: Decimal
    ref: uuid.UUID
    kind: Kind
    note: str
    later: list[datetime | None]
    by_name: dict[str, Decimal]


typed_payloads = st.builds(
    Typed,
    when=st.datetimes(
        timezones=st.one_of(
            st.none(), st.sampled_from([UTC, timezone(timedelta(hours=-9, minutes=-30))])
        )
    ),
    day=st.dates(),
    amount=st.decimals(allow_nan=True, allow_infinity=True, places=None),
    ref=st.uuids(),
    kind=st.sampled_from(Kind),
    note=gen.odd_text,
    later=st.lists(st.one_of(st.none(), st.datetimes(timezones=st.just(UTC))), max_size=3),
    by_name=st.dictionaries(gen.odd_text, st.decimals(allow_nan=False), max_size=3),
)


@gen.bounded(40)
@given(payload=typed_payloads)
def test_a_typed_payload_is_refused_whole_or_read_back_equal(store: Store, payload: Typed) -> None:
    """Through a codec, a payload of datetimes, decimals, UUIDs and enums is refused with
    a typed error (a NaN, a NUL, a lone surrogate) and nothing is stored, or it is stored
    as plain JSON that the codec reads back, by type, equal to what was given."""
    codec = Codec()
    before = store.count()
    with store.client(codec=codec) as client:
        try:
            run = client.start(TYPE, payload)
        except errors.InvalidInput as exc:
            assert str(exc)
            assert store.count() == before, f"{exc!r} but a run was stored"
            event(type(exc).__name__)
            return
        stored = client.get(run.id).payload
    assert stored["amount"] == str(payload.amount) and stored["kind"] == payload.kind.value
    assert codec.decode(stored, Typed) == payload
    event("stored")
