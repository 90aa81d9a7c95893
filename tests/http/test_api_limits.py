"""Flow control over HTTP on both stores: a type's concurrency limits, rate limits and
the types that obey them act as the admin facade does (see test_concurrency_limits.py and
test_rate_limits.py for the rules)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from api_helpers import PREFIX, Api, assert_problem
from conftest import Store
from pydantic import TypeAdapter

from simpleworkflow.server import schemas

TYPE = "limits.api.v1"


@pytest.fixture
def api(store: Store) -> Iterator[Api]:
    api = Api(store)
    with store.client() as client:
        client.admin.set_runtime(TYPE, "python")
    yield api
    api.close()


def test_concurrency_limits_and_keys(api: Api) -> None:
    limits = {"concurrency": 5, "key_concurrency": 1}
    made = api.request("PUT", f"{PREFIX}/types/{TYPE}/concurrency", json=limits)
    assert made.status_code == 200, made.text
    assert TypeAdapter(schemas.RegistryOut).validate_python(made.json()).key_concurrency == 1
    started = api.post(f"{PREFIX}/runs", json={"type": TYPE, "concurrency_key": "c1"})
    assert started.status_code == 201, started.text
    assert started.json()["concurrency_key"] == "c1"


@pytest.mark.parametrize(
    "body", [{"concurrency": 0}, {"key_concurrency": "1"}, {"concurrency": 1, "x": 1}]
)
def test_bad_concurrency_limits_are_422(api: Api, body: dict[str, object]) -> None:
    answer = api.request("PUT", f"{PREFIX}/types/{TYPE}/concurrency", json=body)
    assert answer.status_code == 422, answer.text


def test_rate_limits_are_set_used_listed_and_deleted(api: Api) -> None:
    made = api.request("PUT", f"{PREFIX}/limits/partner-api", json={"rate": "10/s"})
    assert made.status_code == 200, made.text
    TypeAdapter(schemas.RateLimitOut).validate_python(made.json())
    used = api.request(
        "PUT", f"{PREFIX}/types/{TYPE}/rate-limit", json={"rate_limit": "partner-api"}
    )
    assert used.status_code == 200 and used.json()["rate_limit"] == "partner-api", used.text
    assert [x["name"] for x in api.get(f"{PREFIX}/limits").json()] == ["partner-api"]
    assert api.request("DELETE", f"{PREFIX}/limits/partner-api").json() == {"deleted": True}


def test_bad_rate_limits_are_problems(api: Api) -> None:
    bad_rate = api.request("PUT", f"{PREFIX}/limits/partner-api", json={"rate": "ten"})
    assert_problem(bad_rate, 422)
    missing = api.request("PUT", f"{PREFIX}/types/{TYPE}/rate-limit", json={"rate_limit": "nope"})
    assert_problem(missing, 422)
    unknown = api.request(
        "PUT", f"{PREFIX}/types/not.registered.v1/rate-limit", json={"rate_limit": None}
    )
    assert_problem(unknown, 404)
