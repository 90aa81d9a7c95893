"""``POST /runs/{id}/fork`` and ``GET /runs/{id}/forks`` on both stores: a fork answers
201 with the new run, linked both ways; a run or step that does not exist is 404, a run
not finished 409, a bad body 422, and nothing is written by a refusal."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from api_helpers import PREFIX, Api, assert_problem
from conftest import Store
from pydantic import TypeAdapter

from simpleworkflow.server import schemas

TYPE = "content.thumbnail.v1"
RUNS = f"{PREFIX}/runs"


@pytest.fixture
def api(store: Store) -> Iterator[Api]:
    api = Api(store)
    yield api
    api.close()


def journaled(store: Store, api: Api, *steps: str) -> str:
    """A cancelled run whose journal holds ``steps``, in order."""
    run_id: str = api.start(TYPE, {"n": 1})["id"]
    for position, name in enumerate(steps):
        store.sql(
            "insert into workflow_step (run_id, step_name, kind, position, status) "
            "values (?, ?, 'step', ?, 'completed')",
            run_id,
            name,
            position,
        )
    assert api.post(f"{RUNS}/{run_id}/cancel").status_code == 200
    return run_id


def test_a_fork_answers_the_new_run_and_the_original_lists_it(store: Store, api: Api) -> None:
    original = journaled(store, api, "a", "b", "c")
    made = api.post(f"{RUNS}/{original}/fork", json={"from_step": "b", "payload": {"n": 2}})
    assert made.status_code == 201, made.text
    fork = made.json()
    TypeAdapter(schemas.RunOut).validate_python(fork)
    assert (fork["forked_from"], fork["forked_at_step"], fork["payload"]) == (
        original,
        "b",
        {"n": 2},
    )
    steps = api.get(f"{RUNS}/{fork['id']}/steps").json()
    assert [s["step_name"] for s in steps] == ["a"]
    by_position = api.post(f"{RUNS}/{original}/fork", json={"from_step": 2}).json()
    assert by_position["forked_at_step"] == "c" and by_position["payload"] == {"n": 1}
    listed = api.get(f"{RUNS}/{original}/forks").json()
    assert [run["id"] for run in listed] == [fork["id"], by_position["id"]]
    assert api.get(f"{RUNS}/{original}").json()["status"] == "cancelled"


def test_refused_forks_say_why_with_their_status(store: Store, api: Api) -> None:
    original = journaled(store, api, "a")
    runs = store.count()
    unknown_step = api.post(f"{RUNS}/{original}/fork", json={"from_step": "zz"})
    problem = assert_problem(unknown_step, 404, "'zz'", "'a'")
    assert problem["type"] == "urn:simpleworkflow:step-not-found"
    assert_problem(
        api.post(f"{RUNS}/{uuid.uuid4()}/fork", json={"from_step": "a"}), 404, "no workflow run"
    )
    pending = api.start(TYPE)["id"]
    refused = assert_problem(
        api.post(f"{RUNS}/{pending}/fork", json={"from_step": "a"}), 409, "pending"
    )
    assert refused["type"] == "urn:simpleworkflow:fork-refused"
    assert api.post(f"{RUNS}/{original}/fork", json={}).status_code == 422
    assert api.post(f"{RUNS}/{original}/fork", json={"from_step": 1.5}).status_code == 422
    assert_problem(api.get(f"{RUNS}/{uuid.uuid4()}/forks"), 404)
    assert store.count() == runs + 1
