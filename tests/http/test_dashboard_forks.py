"""The dashboard's fork form on both stores: a finished run's page offers its steps to
fork from, the form (with its CSRF token) starts the fork and shows it, both pages link
each other, and a refused fork or a payload that is not JSON keeps the form filled."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
from conftest import Store
from test_dashboard import TYPE, Dash, texts

from simpleworkflow import Client


def cancelled_with_journal(store: Store, client: Client, *steps: str) -> str:
    run_id = client.start(TYPE, {"n": 1}).id
    for position, name in enumerate(steps):
        store.sql(
            "insert into workflow_step (run_id, step_name, kind, position, status) "
            "values (?, ?, 'step', ?, 'completed')",
            run_id,
            name,
            position,
        )
    client.cancel(run_id)
    return run_id


@pytest.fixture
def dash(store: Store) -> Iterator[Dash]:
    found = Dash(store)
    yield found
    found.close()


def test_the_fork_form_starts_a_linked_run_from_the_chosen_step(
    store: Store, dash: Dash, client: Client
) -> None:
    original = cancelled_with_journal(store, client, "a", "loop/~0/x", "b")
    page = dash.get(f"/runs/{original}").text
    assert 'id="fork-form"' in page
    assert "<option>a</option>" in page and "<option>b</option>" in page
    assert "loop/~0/x</option>" not in page  # a point inside a scope is not offered
    assert dash.post(f"/runs/{original}/fork", data={"step": "b"}).status_code == 403  # no CSRF
    made = dash.act(f"/runs/{original}/fork", step="b", payload='{"n": 2}')
    assert made.status_code == 303, made.text
    [fork] = client.admin.forks(original)
    assert made.headers["location"].endswith(f"/runs/{fork.id}?done=forked")
    assert (fork.payload, fork.forked_at_step) == ({"n": 2}, "b")
    shown = dash.get(f"/runs/{fork.id}?done=forked").text
    assert texts(shown, "ok")[0].startswith("This run was forked")
    assert f'id="forked-from" href="/runs/{original}"' in shown
    assert f'href="/runs/{fork.id}"' in dash.get(f"/runs/{original}").text
    assert client.get(original).status.value == "cancelled"


def test_a_refused_fork_keeps_the_form_filled_and_writes_nothing(
    store: Store, dash: Dash, client: Client
) -> None:
    original = cancelled_with_journal(store, client, "a")
    bad: httpx.Response = dash.act(f"/runs/{original}/fork", step="a", payload="{n: 2}")
    assert bad.status_code == 422 and "not JSON" in bad.text and "{n: 2}" in bad.text
    unknown = dash.act(f"/runs/{original}/fork", step="zz")
    assert unknown.status_code == 422 and "no journal entry at step" in unknown.text
    pending = client.start(TYPE).id
    assert 'id="fork-form"' not in dash.get(f"/runs/{pending}").text
    assert client.admin.forks(original) == []
