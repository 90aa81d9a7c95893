"""Topics over HTTP on both stores: subscriptions managed and events published through the
API act as the admin facade and ``Client.publish`` do (see test_topics.py for the rules)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from api_helpers import PREFIX, Api, assert_problem
from conftest import Store
from pydantic import TypeAdapter

from simpleworkflow.server import schemas

INVOICE = "billing.invoice.v1"
MAIL = "notify.email.v1"
SUBSCRIPTIONS = f"{PREFIX}/subscriptions"


@pytest.fixture
def api(store: Store) -> Iterator[Api]:
    api = Api(store)
    yield api
    api.close()


def test_subscribe_publish_once_per_event_and_unsubscribe(store: Store, api: Api) -> None:
    for pattern, type_name in (("orders.*", INVOICE), ("orders.#", MAIL)):
        made = api.request("PUT", SUBSCRIPTIONS, json={"pattern": pattern, "type": type_name})
        assert made.status_code == 200, made.text
        TypeAdapter(schemas.SubscriptionOut).validate_python(made.json())
    listed = api.get(SUBSCRIPTIONS, params={"topic": "orders.created"}).json()
    assert sorted(s["workflow_type"] for s in listed) == [INVOICE, MAIL]

    first = api.post(
        f"{PREFIX}/topics/orders.created/publish", json={"payload": {"id": 7}, "event_id": "e1"}
    )
    assert first.status_code == 200, first.text
    body = first.json()
    TypeAdapter(schemas.PublishedOut).validate_python(body)
    assert (body["topic"], body["event_id"], body["started"]) == ("orders.created", "e1", 2)
    assert sorted(r["type"] for r in body["runs"]) == [INVOICE, MAIL]
    assert all(r["payload"] == {"id": 7} for r in body["runs"])

    again = api.post(f"{PREFIX}/topics/orders.created/publish", json={"event_id": "e1"}).json()
    assert again["started"] == 0
    assert {r["id"] for r in again["runs"]} == {r["id"] for r in body["runs"]}
    assert store.count() == 2

    removed = api.delete(SUBSCRIPTIONS, params={"pattern": "orders.*", "type": INVOICE})
    assert removed.json() == {"removed": True}
    gone = api.delete(SUBSCRIPTIONS, params={"pattern": "orders.*", "type": INVOICE})
    assert gone.json() == {"removed": False}
    other = api.post(f"{PREFIX}/topics/orders.created/publish", json={"event_id": "e2"}).json()
    assert [r["type"] for r in other["runs"]] == [MAIL]


def test_a_topic_nobody_subscribed_to_starts_nothing(store: Store, api: Api) -> None:
    body = api.post(f"{PREFIX}/topics/nobody.listens/publish", json={}).json()
    assert (body["started"], body["runs"]) == (0, [])
    assert store.count() == 0


def test_bad_patterns_topics_and_fields_are_refused_and_store_nothing(
    store: Store, api: Api
) -> None:
    bad_pattern = api.request("PUT", SUBSCRIPTIONS, json={"pattern": "Orders..x", "type": INVOICE})
    assert_problem(bad_pattern, 422)
    mixed = api.request("PUT", SUBSCRIPTIONS, json={"pattern": "a.*.#", "type": INVOICE})
    assert_problem(mixed, 422)
    unknown = api.request(
        "PUT", SUBSCRIPTIONS, json={"pattern": "orders.*", "type": INVOICE, "colour": "red"}
    )
    assert_problem(unknown, 422)
    assert_problem(api.post(f"{PREFIX}/topics/Bad Topic/publish", json={}), 422)
    assert_problem(api.post(f"{PREFIX}/topics/orders.x/publish", json={"event_id": 5}), 422)
    assert api.get(SUBSCRIPTIONS).json() == []
    assert store.count() == 0
