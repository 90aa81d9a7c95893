"""``GET /runs/{id}/streams/{key}``: a run's stream as Server-Sent Events, resumable by
``Last-Event-ID``; ``GET /runs/{id}/streams``: a run's streams; the dashboard's route for
its run page's live streams. Both stores."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import pytest
from api_helpers import PREFIX, READ_TOKEN, TOKEN, Api, assert_problem
from conftest import Store, poller_thread
from test_dashboard import Dash
from worker_app import wait_until

from simpleworkflow import App, Client, Context
from simpleworkflow.backends import Backend
from simpleworkflow.backends.records import Claim
from simpleworkflow.dashboard import pages
from simpleworkflow.server import Auth

RUNS = f"{PREFIX}/runs"
WRITER = "test.api.streams.v1"


@pytest.fixture
def api(store: Store) -> Iterator[Api]:
    api = Api(store, auth=Auth(token=TOKEN, read_token=READ_TOKEN))
    yield api
    api.close()


def events(text: str) -> list[dict[str, str]]:
    """The SSE events of a response body, each as its fields."""
    found = []
    for block in text.split("\n\n"):
        fields = dict(line.split(": ", 1) for line in block.splitlines() if ": " in line)
        if "data" in fields:
            found.append(fields)
    return found


@pytest.fixture
def written(store: Store, client: Client) -> str:
    """A finished run that wrote five words to stream ``words`` (then closed it)."""
    app = App(store.url, schema=store.schema)

    @app.workflow(WRITER)
    def body(payload: Any, ctx: Context) -> Any:
        def speak() -> None:
            for word in ["to", "be", "or", "not", "été"]:
                ctx.stream_append("words", {"word": word})

        ctx.step("speak", speak)
        ctx.stream_close("words")

    run_id = client.start(WRITER).id
    with poller_thread(app, type_prefixes=["test.%"], poll_interval=0.1):
        wait_until(lambda: client.get(run_id).is_terminal, 20, "the run ends")
    return run_id


READ = {"Authorization": f"Bearer {READ_TOKEN}"}


def test_a_stream_is_served_as_server_sent_events_with_ids_and_an_end(
    api: Api, written: str
) -> None:
    response = api.get(f"{RUNS}/{written}/streams/words", headers=READ)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/event-stream")
    got = events(response.text)
    assert [(e.get("id"), json.loads(e["data"])) for e in got[:-1]] == [
        (str(n), {"word": w}) for n, w in enumerate(["to", "be", "or", "not", "été"])
    ]
    assert got[-1] == {"event": "end", "data": "{}"}
    listed = api.get(f"{RUNS}/{written}/streams", headers=READ)
    assert listed.status_code == 200
    assert [(s["key"], s["items"], s["closed"]) for s in listed.json()] == [("words", 5, True)]


def test_last_event_id_resumes_after_that_item(api: Api, written: str) -> None:
    headers = {**READ, "Last-Event-ID": "2"}
    response = api.get(f"{RUNS}/{written}/streams/words", headers=headers)
    assert [e.get("id") for e in events(response.text)] == ["3", "4", None]
    after = api.get(f"{RUNS}/{written}/streams/words?after=3", headers=READ)
    assert [e.get("id") for e in events(after.text)] == ["4", None]


def test_bad_stream_requests_are_refused_with_a_problem(api: Api, written: str) -> None:
    unknown = "0193b0c0-0000-7000-8000-000000000000"
    assert_problem(api.get(f"{RUNS}/{unknown}/streams/words", headers=READ), 404)
    assert_problem(api.get(f"{RUNS}/{unknown}/streams", headers=READ), 404)
    assert_problem(api.get(f"{RUNS}/{written}/streams/b%20d", headers=READ), 422, "stream key")
    bad_id = {**READ, "Last-Event-ID": "soon"}
    assert_problem(api.get(f"{RUNS}/{written}/streams/words", headers=bad_id), 422, "Last-Event")
    assert api.get(f"{RUNS}/{written}/streams/words").status_code == 401


def test_the_run_page_lists_the_runs_streams_with_their_items(
    store: Store, client: Client, written: str
) -> None:
    dash = Dash(store)
    try:
        page = dash.get(f"/runs/{written}").text
        plain = dash.get(f"/runs/{client.start(WRITER).id}").text
    finally:
        dash.close()
    row = page[page.index('id="stream-words"') :].split("</tr>")[0]
    assert ">5<" in row and "closed" in row
    assert all(word in row for word in ["to", "be", "or", "not", "été"])
    assert "<h2>Streams</h2>" not in plain, "a run without streams shows no section"


def test_the_dashboard_serves_a_stream_live_on_its_session(store: Store, written: str) -> None:
    """The run page's script reads a stream through the dashboard's own route, on the
    session's cookie (a browser's EventSource sends no token): the same events, resumed
    after ``Last-Event-ID``; refused without a login."""
    dash = Dash(store, auth=Auth(token=TOKEN, read_token=READ_TOKEN))
    try:
        url = f"/runs/{written}/streams/words"
        refused = dash.get(url)
        assert refused.status_code in (303, 401), refused.text
        assert not refused.headers.get("content-type", "").startswith("text/event-stream")
        dash.log_in(READ_TOKEN)
        response = dash.get(url)
        assert response.status_code == 200, response.text
        assert response.headers["content-type"].startswith("text/event-stream")
        assert [e.get("id") for e in events(response.text)] == ["0", "1", "2", "3", "4", None]
        resumed = dash.get(url, headers={"Last-Event-ID": "2"})
        assert [e.get("id") for e in events(resumed.text)] == ["3", "4", None]
        after = dash.get(f"{url}?after=3")
        assert [(e.get("id"), e["data"]) for e in events(after.text)] == [
            ("4", '{"word":"été"}'),
            (None, "{}"),
        ]
        assert dash.get(f"{url}?after=soon").status_code == 422
        assert dash.get(f"/runs/{written}/streams/b%20d").status_code == 422
    finally:
        dash.close()


def test_the_run_page_follows_the_open_streams_of_a_running_run(
    store: Store, client: Client, backend: Backend
) -> None:
    """A stream that may still grow gets a live row (the dashboard's event route, after
    the last item shown, kept across the page's refreshes); a closed one, or any of an
    ended run, does not."""
    run_id = client.start(WRITER).id
    (lease,) = backend.execute(backend.claim(Claim("w", (WRITER,), 1, 30)))
    items = [(0, '"a"', False), (1, '"b"', False)]
    assert backend.execute(backend.append_stream(run_id, lease.token, "open", "o", items))
    closing = [(0, '"c"', False), (1, None, True)]
    assert backend.execute(backend.append_stream(run_id, lease.token, "shut", "s", closing))
    dash = Dash(store)
    try:
        page = dash.get(f"/runs/{run_id}").text
        client.cancel(run_id)
        ended = dash.get(f"/runs/{run_id}").text
    finally:
        dash.close()
    open_row = page[page.index('id="stream-open"') :].split(">")[0]
    assert f'data-live="/runs/{run_id}/streams/open?after=1"' in open_row
    assert 'hx-preserve="true"' in open_row
    assert "data-live" not in page[page.index('id="stream-shut"') :].split(">")[0]
    assert "data-live" not in ended


def test_a_live_stream_on_the_dashboard_stops_once_its_session_logged_out(
    store: Store, client: Client, backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The session is asked again while items flow (here before every item): after a
    logout the stream stops, without the ``end`` event (the browser's next try is
    refused), as the next page would be."""
    monkeypatch.setattr(pages, "SESSION_RECHECK_SECONDS", 0.0)
    run_id = client.start(WRITER).id
    (lease,) = backend.execute(backend.claim(Claim("w", (WRITER,), 1, 30)))

    def append(origin: str) -> None:
        items = [(0, f'"{origin}"', False)]
        assert backend.execute(backend.append_stream(run_id, lease.token, "s", origin, items))

    append("before")
    dash = Dash(store, auth=Auth(token=TOKEN, read_token=READ_TOKEN))
    try:
        dash.log_in(READ_TOKEN)
        csrf = dash.csrf()

        async def scenario() -> Any:
            reading = asyncio.ensure_future(dash.http.get(f"/runs/{run_id}/streams/s"))
            await asyncio.sleep(0.5)  # it has sent the first item, and waits
            assert not reading.done()
            out = await dash.http.post("/logout", data={"csrf_token": csrf})
            assert out.status_code == 303
            await asyncio.to_thread(append, "after")
            return await asyncio.wait_for(reading, 30)

        response = dash._loop.run_until_complete(scenario())
    finally:
        dash.close()
    assert [(e.get("id"), e["data"]) for e in events(response.text)] == [("0", '"before"')]
