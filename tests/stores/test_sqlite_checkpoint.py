"""SQLite: the write-ahead log reaches the database file without a commit waiting for it,
every commit is synced unless the URL opts out, and the backend's connection keeps its
temporary files in memory.

A thread of the backend's own copies the WAL back (a checkpoint) after write
transactions; SQLite's automatic checkpoint, inside a commit, is left for when the WAL
has grown large. Reading the file with ``immutable=1`` ignores the WAL, so it shows only
what has been checkpointed.
"""

from __future__ import annotations

import sqlite3
import threading
import time

import pytest
from conftest import Store

from simpleworkflow import Client, config, errors
from simpleworkflow.backends import open_backend
from simpleworkflow.backends.base import Op, Rows, Statement

THREAD = "simpleworkflow-sqlite-checkpoint"


def checkpoint_threads() -> set[threading.Thread]:
    """The checkpoint threads alive now (other tests' unclosed backends may own some)."""
    return {t for t in threading.enumerate() if t.name == THREAD}


def checkpointed_runs(path: str) -> int:
    """Runs in the database file itself, not counting the WAL."""
    try:
        lite = sqlite3.connect(f"file:{path}?immutable=1", uri=True)
        try:
            return int(lite.execute("select count(*) from workflow_run").fetchone()[0])
        finally:
            lite.close()
    except sqlite3.DatabaseError:  # read while a page was being copied: look again
        return -1


def test_a_few_writes_are_checkpointed_in_the_background(store: Store) -> None:
    if store.kind != "sqlite":
        pytest.skip("SQLite's write-ahead log")
    path = config.sqlite_path(store.url)
    others = checkpoint_threads()
    with store.client() as client:
        for _ in range(5):  # a few pages of WAL, far below any automatic checkpoint
            client.start("test.checkpoint.v1", {})
        deadline = time.monotonic() + 10
        while checkpointed_runs(path) != 5 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert checkpointed_runs(path) == 5
        assert checkpoint_threads() - others
    assert not checkpoint_threads() - others, "close() left it running"


def test_reads_alone_start_no_checkpoint_thread(store: Store) -> None:
    if store.kind != "sqlite":
        pytest.skip("SQLite's write-ahead log")
    others = checkpoint_threads()
    with store.client() as client:
        client.list()
        assert not checkpoint_threads() - others


def test_statement_journals_stay_in_memory(store: Store) -> None:
    """A batch's inserts change hundreds of pages; their undo copies must not go to disk."""
    if store.kind != "sqlite":
        pytest.skip("a SQLite setting")
    backend = store.backend()
    try:
        rows = backend.execute(_pragma("temp_store"), readonly=True)
    finally:
        backend.close()
    assert rows == [{"temp_store": 2}]  # 2 is MEMORY


@pytest.mark.parametrize(
    ("query", "level"), [("", 2), ("?synchronous=normal", 1), ("?synchronous=FULL", 2)]
)
def test_every_commit_is_synced_unless_the_url_says_normal(
    store: Store, query: str, level: int
) -> None:
    """FULL (2) by default: an acknowledged write survives a power cut. NORMAL (1) is
    the opt-in that syncs the log only at checkpoints."""
    if store.kind != "sqlite":
        pytest.skip("a SQLite setting")
    backend = open_backend(store.url + query)
    try:
        rows = backend.execute(_pragma("synchronous"), readonly=True)
    finally:
        backend.close()
    assert rows == [{"synchronous": level}]
    with Client(store.url + query) as client:
        assert client.get(client.start("test.sync.v1").id).type == "test.sync.v1"


@pytest.mark.parametrize(
    ("url", "complaint"),
    [
        ("sqlite:///runs.db?synchronous=off", "synchronous='off'"),
        ("sqlite:///runs.db?journal_mode=delete", "unknown option 'journal_mode'"),
    ],
)
def test_other_sqlite_url_options_are_refused(url: str, complaint: str) -> None:
    with pytest.raises(errors.ConfigurationError, match=complaint):
        Client(url)


def _pragma(name: str) -> Op[Rows]:
    return (yield Statement(f"pragma {name}"))
