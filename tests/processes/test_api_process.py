"""The API through a real ``simpleworkflow serve`` process on a free port, on both stores:
start, signal and cancel over HTTP, with a real worker running the workflow between; a
stream read live over Server-Sent Events."""

from __future__ import annotations

import json
import signal
import socket
import time
from collections.abc import Iterator
from typing import Any

import httpx
from api_helpers import PREFIX, served, serving
from conftest import Store, poller_thread

from simpleworkflow import App, Context

TYPE = "orders.approve.v1"


def test_start_signal_and_cancel_through_a_server_process(store: Store) -> None:
    app = App(store.url, schema=store.schema)

    @app.workflow(TYPE)
    async def approve(payload: dict[str, Any], ctx: Context) -> dict[str, Any]:
        decision = await ctx.wait_for_event("decision", event="approved", timeout="1h")
        return {"order": payload["order"], "decision": decision}

    with served(store) as base, httpx.Client(base_url=f"{base}{PREFIX}") as http:
        started = http.post(
            "/runs", json={"type": TYPE, "payload": {"order": 7}, "idempotency_key": "o7"}
        )
        assert started.status_code == 201, started.text
        run_id = started.json()["id"]
        again = http.post(
            "/runs", json={"type": TYPE, "payload": {"order": 7}, "idempotency_key": "o7"}
        )
        assert again.status_code == 200 and again.json() | {"created": True} == started.json()
        doomed = http.post("/runs", json={"type": TYPE, "payload": {"order": 8}}).json()["id"]

        with poller_thread(app):
            waiting = poll(http, run_id, lambda run: "waiting-signal" in run["waiting_states"])
            assert waiting["waiting_for"]["event"] == "approved"
            sent = http.post(
                f"/runs/{run_id}/signals", json={"event": "approved", "payload": "yes"}
            )
            assert sent.status_code == 201 and sent.json()["woke"] is True
            done = poll(http, run_id, lambda run: run["status"] == "succeeded")
            assert done["result"] == {"order": 7, "decision": "yes"}

            poll(http, doomed, lambda run: "waiting-signal" in run["waiting_states"])
            cancelled = http.post(f"/runs/{doomed}/cancel", json={"reason": "out of stock"})
            assert cancelled.status_code == 200 and cancelled.json()["cancelled"] is True
        assert http.get(f"/runs/{doomed}").json()["status"] == "cancelled"
        late = http.post(f"/runs/{doomed}/signals", json={"event": "approved"})
        assert late.status_code == 409
        assert late.headers["content-type"] == "application/problem+json"
        assert "already finished" in late.json()["detail"]
        events = [e["event_type"] for e in http.get(f"/runs/{doomed}/events").json()]
        assert events[-1] == "cancelled"
    assert store.count("workflow_signal") == 1  # the late signal was not stored


def poll(http: httpx.Client, run_id: str, done: Any, timeout: float = 20) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        run: dict[str, Any] = http.get(f"/runs/{run_id}").json()
        if done(run):
            return run
        assert time.monotonic() < deadline, run
        time.sleep(0.05)


TALK = "test.sse.talk.v1"


def sse_events(response: httpx.Response) -> Iterator[dict[str, str]]:
    """The events of a Server-Sent Events response as they arrive, each as its fields."""
    fields: dict[str, str] = {}
    for line in response.iter_lines():
        if line:
            name, _, value = line.partition(": ")
            fields[name] = value
        elif "data" in fields:
            yield fields
            fields = {}
        else:
            fields = {}


def test_a_start_is_answered_in_one_write(store: Store) -> None:
    """The answer's head and body leave the server together (``server.one_write``): the
    first read on the client's socket holds all of it, as a packet capture would show."""
    with served(store) as base:
        host, port = base.removeprefix("http://").rsplit(":", 1)
        body = json.dumps({"type": TYPE, "payload": {"order": 9}}).encode()
        head = (
            f"POST {PREFIX}/runs HTTP/1.1\r\nHost: {host}:{port}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
        )
        with socket.create_connection((host, int(port)), timeout=30) as sock:
            for _ in range(3):  # the connection kept alive: each answer in one write
                sock.sendall(head.encode() + body)
                first = sock.recv(1 << 20)
                answer_head, _, answer = first.partition(b"\r\n\r\n")
                assert answer_head.startswith(b"HTTP/1.1 201"), first
                length = next(
                    int(line.split(b":")[1])
                    for line in answer_head.split(b"\r\n")
                    if line.lower().startswith(b"content-length:")
                )
                assert len(answer) == length, "the body came in a second write"
                assert json.loads(answer)["type"] == TYPE


def test_a_stream_is_read_live_over_sse_from_a_server_process(store: Store) -> None:
    """A worker writes a stream one word at a time, each after the reader acknowledged the
    last (a signal): so every item reaches the reader over HTTP while the stream is
    open, not at its end. A reader cut off after two items comes back with
    ``Last-Event-ID`` and gets the rest, once, then the ``end`` event."""
    app = App(store.url, schema=store.schema)

    @app.workflow(TALK)
    async def talk(payload: Any, ctx: Context) -> str:
        for n in range(3):
            await ctx.stream_append("words", f"word-{n}")
            await ctx.wait_for_event(f"ack-{n}", event="ack", timeout="1h")
        await ctx.stream_close("words")
        return "done"

    with (
        served(store) as base,
        httpx.Client(base_url=f"{base}{PREFIX}", timeout=30) as http,
        poller_thread(app),
    ):
        run_id = http.post("/runs", json={"type": TALK}).json()["id"]
        url = f"/runs/{run_id}/streams/words"

        def open_now() -> bool:
            (words,) = http.get(f"/runs/{run_id}/streams").json()
            return not words["closed"] and http.get(f"/runs/{run_id}").json()["status"] != (
                "succeeded"
            )

        got: list[tuple[str, Any]] = []
        with http.stream("GET", url) as response:
            assert response.status_code == 200
            assert response.headers["content-type"].startswith("text/event-stream")
            for event in sse_events(response):
                got.append((event["id"], json.loads(event["data"])))
                assert open_now(), "an item came only once the stream was over"
                if len(got) == 2:
                    break  # cut off before acknowledging the second
                assert http.post(f"/runs/{run_id}/signals", json={"event": "ack"}).is_success
        assert http.post(f"/runs/{run_id}/signals", json={"event": "ack"}).is_success
        ended = False
        with http.stream("GET", url, headers={"Last-Event-ID": got[-1][0]}) as response:
            for event in sse_events(response):
                if event.get("event") == "end":
                    ended = True
                    break
                got.append((event["id"], json.loads(event["data"])))
                assert open_now(), "an item came only once the stream was over"
                assert http.post(f"/runs/{run_id}/signals", json={"event": "ack"}).is_success
        assert ended
        assert got == [("0", "word-0"), ("1", "word-1"), ("2", "word-2")]
        assert poll(http, run_id, lambda run: run["status"] == "succeeded")["result"] == "done"


def test_the_server_serves_metrics_counting_what_the_api_started(store: Store) -> None:
    from prometheus_client.parser import text_string_to_metric_families

    with served(store) as base, httpx.Client(base_url=base) as http:
        for order in (1, 2):
            assert http.post(f"{PREFIX}/runs", json={"type": TYPE, "payload": {"order": order}})
        scraped = http.get("/metrics")  # at /metrics itself: no redirect to /metrics/
        assert scraped.status_code == 200, scraped.text
    samples = {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(scraped.text)
        for sample in family.samples
    }
    assert samples[("simpleworkflow_runs_started_total", (("type", TYPE),))] == 2
    assert samples[("simpleworkflow_runs_due", (("type", TYPE),))] == 2


def test_sigterm_stops_a_server_while_a_client_follows_an_open_stream(store: Store) -> None:
    """An event stream ends only with its stream, yet SIGTERM does not wait for it: the
    server closes it and exits (uvicorn re-raises the signal once it has shut down)."""
    app = App(store.url, schema=store.schema)

    @app.workflow(TALK)
    async def talk(payload: Any, ctx: Context) -> str:
        await ctx.stream_append("words", "hello")
        await ctx.wait_for_event("never", event="never", timeout="1h")
        return "done"

    with (
        serving(store) as (base, server),
        httpx.Client(base_url=f"{base}{PREFIX}", timeout=30) as http,
        poller_thread(app),
    ):
        run_id = http.post("/runs", json={"type": TALK}).json()["id"]
        with http.stream("GET", f"/runs/{run_id}/streams/words") as response:
            first = next(sse_events(response))
            assert json.loads(first["data"]) == "hello"
            server.terminate()
            assert server.wait(60) in (0, -signal.SIGTERM)
