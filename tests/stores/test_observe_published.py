"""Observer hooks of what a run publishes and of forks, on both stores: ``value_set``,
``stream_appended`` and ``stream_closed`` fire once per committed write, from the body or
a step's function; nothing fires again when a step runs again after a failure, nor when a
later attempt replays the body from the journal; ``run_forked`` fires once per fork, after
``run_created``, on the admin's observers (a client's admin shares the client's). The
Prometheus counters count the same."""

from __future__ import annotations

import threading
from typing import Any

from conftest import Store
from prometheus_client import CollectorRegistry
from test_durable import wait_terminal, working

from simpleworkflow import Client, Context, PermanentError, RunStatus, observe
from simpleworkflow.app import App
from simpleworkflow.metrics import MetricsObserver
from simpleworkflow.retry import RetryPolicy

PUBLISHER = "test.observe.publisher.v1"
FORKED = "test.observe.forked.v1"
QUICK = RetryPolicy(backoff="fixed", base=0.1, jitter=0)


class Published(observe.Observer):
    """The publishing hooks' events, and the forks, in the order they fired."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.events: list[Any] = []
        self.created: list[str] = []

    def _note(self, event: Any) -> None:
        with self._lock:
            self.events.append(event)

    def value_set(self, event: observe.ValueSet) -> None:
        self._note(event)

    def stream_appended(self, event: observe.StreamAppended) -> None:
        self._note(event)

    def stream_closed(self, event: observe.StreamClosed) -> None:
        self._note(event)

    def run_forked(self, event: observe.RunForked) -> None:
        self._note(event)

    def run_created(self, event: observe.RunCreated) -> None:
        with self._lock:
            self.created.append(event.run.id)
            self.events.append(("created", event.run.id))

    def attempt_started(self, event: observe.AttemptStarted) -> None:
        self._note(("attempt", event.run.attempt))


def test_each_committed_write_fires_once_and_neither_a_step_run_again_nor_a_replay_fires(
    store: Store,
) -> None:
    """The step appends three tokens and fails its first try (its items are committed
    then): its second try appends the same three, which are left out, and says nothing.
    The first attempt of the run fails at its end: the second replays the set, the step,
    the body's append and the close from the journal, and fires none of them again."""
    published, registry = Published(), CollectorRegistry()
    metrics = MetricsObserver(registry)
    app = App(store.url, schema=store.schema, retry=QUICK, observers=[published, metrics])
    tries: list[int] = []

    def tokens(ctx: Context) -> int:
        tries.append(1)
        for token in ("a", "b", "c"):
            ctx.stream_append("tokens", token)
        if len(tries) == 1:
            raise ConnectionError("the model's connection dropped")
        return 3

    @app.workflow(PUBLISHER)
    async def body(payload: Any, ctx: Context) -> Any:
        await ctx.set_value("stage", "writing")
        written = await ctx.step("generate", tokens, ctx, retry=QUICK)
        await ctx.stream_append("tokens", "end")
        await ctx.stream_close("tokens")
        if ctx.attempt == 1:
            raise RuntimeError("the end of the first attempt fails")
        return written

    with app.client() as client:
        run_id = client.start(PUBLISHER).id
        with working(app):
            done = wait_terminal(client, run_id)
        assert done.status is RunStatus.SUCCEEDED, done.last_error
        items = [(i.offset, i.value) for i in client.stream_items(run_id, "tokens")]
    assert items == [(0, "a"), (1, "b"), (2, "c"), (3, "end")]
    assert len(tries) == 2

    seen = [e for e in published.events if not isinstance(e, tuple) or e[0] != "created"]
    attempts = [i for i, e in enumerate(seen) if isinstance(e, tuple)]
    first, rest = seen[attempts[0] + 1 : attempts[-1]], seen[attempts[-1] + 1 :]
    assert rest == []  # the last attempt replayed everything
    assert all(e.run.id == run_id for e in first if not isinstance(e, tuple))
    values = [(e.key, e.step) for e in first if isinstance(e, observe.ValueSet)]
    assert values == [("stage", "value:stage")]
    # The step's tokens, in one or more batches of its first try (a batch may be cut by
    # the buffer's timer), then the body's append: offsets follow without a gap.
    appended = [e for e in first if isinstance(e, observe.StreamAppended)]
    assert [(e.step, e.key) for e in appended[:-1]] == [("generate", "tokens")] * (
        len(appended) - 1
    )
    assert sum(e.items for e in appended[:-1]) == 3
    assert all(e.last - e.first + 1 == e.items for e in appended)
    assert [o for e in appended for o in range(e.first, e.last + 1)] == [0, 1, 2, 3]
    last = appended[-1]
    assert (last.step, last.items, last.first, last.last) == ("@stream:tokens", 1, 3, 3)
    closed = [e for e in first if isinstance(e, observe.StreamClosed)]
    assert [(e.key, e.step) for e in closed] == [("tokens", "@stream:tokens#2")]
    # In the order they were written.
    kinds = [type(e).__name__ for e in first if not isinstance(e, tuple)]
    assert kinds == ["ValueSet", *["StreamAppended"] * len(appended), "StreamClosed"]
    assert all(e.at is not None for e in first if not isinstance(e, tuple))
    # The counters count the same: the step's second try and the replay add nothing.
    counted = {
        name: registry.get_sample_value(f"simpleworkflow_{name}_total", {"type": PUBLISHER})
        for name in ("values_set", "stream_items", "streams_closed")
    }
    assert counted == {"values_set": 1, "stream_items": 4, "streams_closed": 1}


def test_a_fork_fires_run_forked_once_after_run_created(store: Store, client: Client) -> None:
    published = Published()
    app = App(store.url, schema=store.schema, retry=QUICK)

    @app.workflow(FORKED)
    async def body(payload: dict[str, Any], ctx: Context) -> Any:
        await ctx.step("a", lambda: 1)
        if payload.get("fail"):
            await ctx.step("b", _fails)
        return "done"

    original = client.start(FORKED, {"fail": True}).id
    with working(app):
        assert wait_terminal(client, original).status is RunStatus.FAILED
    registry = CollectorRegistry()
    client.observe(published)
    client.observe(MetricsObserver(registry))
    fork = client.admin.fork(original, from_step="b", payload={})
    forks = registry.get_sample_value("simpleworkflow_runs_forked_total", {"type": FORKED})
    assert forks == 1
    assert published.events == [
        ("created", fork.id),
        observe.RunForked(fork, forked_from=original, from_step="b"),
    ]
    with working(app):
        assert wait_terminal(client, fork.id).status is RunStatus.SUCCEEDED
    assert published.created == [fork.id]  # the worker's app has its own observers


def _fails() -> None:
    raise PermanentError("b was told to fail")
