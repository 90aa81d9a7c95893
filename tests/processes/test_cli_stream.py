"""``simpleworkflow runs stream`` as an operator runs it, in a process of its own: it prints
each item as the run writes it (while the run still waits for a signal to write the
next), stops with status 0 at the close, and Ctrl-C stops it with status 130 and no
traceback, also while it waits for a stream not written yet."""

from __future__ import annotations

import queue
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from typing import IO, Any

import pytest
from conftest import Store, poller_thread

from simpleworkflow import App, Context

LIVE = "test.cli.stream.live.v1"
#: Seconds to wait for a line: generous, the machine is shared.
PATIENCE = 30


class Lines:
    """The lines a pipe gives, read on a thread: a test waits for the next one with a
    timeout instead of blocking for ever."""

    def __init__(self, pipe: IO[str]) -> None:
        self._lines: queue.Queue[str | None] = queue.Queue()
        self.seen: list[str] = []
        threading.Thread(target=self._read, args=(pipe,), daemon=True).start()

    def _read(self, pipe: IO[str]) -> None:
        for line in pipe:
            self._lines.put(line.rstrip("\n"))
        self._lines.put(None)

    def next(self) -> str | None:
        line = self._lines.get(timeout=PATIENCE)
        if line is not None:
            self.seen.append(line)
        return line

    def rest(self) -> list[str]:
        found = []
        while (line := self.next()) is not None:
            found.append(line)
        return found


@pytest.fixture
def follow(store: Store) -> Iterator[Any]:
    """``follow(run_id, key, *options)``: the command, started; stopped at the test's end."""
    started: list[subprocess.Popen[str]] = []

    def start(*argv: str) -> tuple[subprocess.Popen[str], Lines, Lines]:
        proc = subprocess.Popen(
            [sys.executable, "-m", "simpleworkflow", "runs", "stream", *argv],
            env=store.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        started.append(proc)
        assert proc.stdout is not None and proc.stderr is not None
        return proc, Lines(proc.stdout), Lines(proc.stderr)

    yield start
    for proc in started:
        if proc.poll() is None:
            proc.kill()
            proc.wait(PATIENCE)


def test_items_are_printed_as_they_are_written_until_the_close(store: Store, follow: Any) -> None:
    app = App(store.url, schema=store.schema)

    @app.workflow(LIVE)
    async def body(payload: Any, ctx: Context) -> str:
        await ctx.stream_append("tokens", "first")
        await ctx.wait_for_event("more", event="more")
        await ctx.stream_append("tokens", {"second": 2})
        await ctx.stream_close("tokens")
        return "done"

    with app.client() as client, poller_thread(app, poll_interval=0.05):
        run_id = client.start(LIVE).id
        # Followed once the stream is written: before that the command says on stderr
        # that it waits for it (test_ctrl_c_stops_following_with_status_130).
        assert next(client.read_stream(run_id, "tokens")).value == "first"
        proc, out, err = follow(run_id, "tokens")
        assert out.next() == '0\t"first"', err.seen
        assert proc.poll() is None  # still following: the run waits for its signal
        client.signal(run_id, "more")
        assert out.rest() == ['1\t{"second":2}']
        assert proc.wait(PATIENCE) == 0
        assert err.rest() == []


def test_ctrl_c_stops_following_with_status_130(store: Store, follow: Any) -> None:
    """No worker runs: the stream is not written yet, and the command waits for it."""
    with store.client() as client:
        run_id = client.start(LIVE).id
    proc, out, err = follow(run_id, "tokens", "--json")
    warning = err.next()
    assert warning is not None and f"run {run_id} has no stream 'tokens' yet" in warning
    proc.send_signal(signal.SIGINT)
    assert proc.wait(PATIENCE) == 130
    assert out.rest() == []
    assert not any("Traceback" in line for line in err.rest())
