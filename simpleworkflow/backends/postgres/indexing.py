"""Creating and dropping the optional payload index on Postgres, on a connection of its
own in autocommit mode: ``create index concurrently`` cannot run inside a transaction,
and builds without blocking the table's writes (taking longer than a statement of the
library may, so the connection has no statement timeout).

A concurrent build that was interrupted (cancelled, the session killed, a server restart)
leaves an index marked invalid: it serves no query, yet every write maintains it, and
``if not exists`` would keep it. ``create`` finds it by ``pg_index.indisvalid``, drops it
and builds it again, and says so (``rebuilt``).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from simpleworkflow.backends.payload_index import Action
from simpleworkflow.models import PayloadIndex

#: Seconds between two tries of the lock while another session creates or drops the index.
LOCK_PAUSE = 0.2


def apply(conn: Any, q: Mapping[str, str], schema: str, action: Action) -> PayloadIndex:
    """Do ``action`` on ``schema``'s payload index with ``conn`` (autocommit)."""
    if action == "status":
        return state(conn, q, schema)
    key = {"key": f"simpleworkflow.payload_index.{schema}"}
    while not conn.execute(q["payload_index_try_lock"].encode(), key).fetchone()[0]:
        time.sleep(LOCK_PAUSE)
    try:
        return _create(conn, q, schema) if action == "create" else _drop(conn, q, schema)
    finally:
        if not conn.broken:  # else the lock went with the session
            conn.execute(q["payload_index_unlock"].encode(), key)


def state(conn: Any, q: Mapping[str, str], schema: str) -> PayloadIndex:
    row = conn.execute(q["payload_index_state"].encode(), {"schema": schema}).fetchone()
    if row is None:
        return PayloadIndex(present=False, valid=False, size_bytes=0)
    return PayloadIndex(present=True, valid=bool(row[0]), size_bytes=int(row[1]))


def _create(conn: Any, q: Mapping[str, str], schema: str) -> PayloadIndex:
    before = state(conn, q, schema)
    if before.valid:
        return before
    if before.present:  # left invalid by a build that did not finish
        conn.execute(q["drop_payload_index"].encode())
    conn.execute(q["create_payload_index"].encode())
    after = state(conn, q, schema)
    return PayloadIndex(
        after.present, after.valid, after.size_bytes, changed=True, rebuilt=before.present
    )


def _drop(conn: Any, q: Mapping[str, str], schema: str) -> PayloadIndex:
    before = state(conn, q, schema)
    if before.present:
        conn.execute(q["drop_payload_index"].encode())
    return PayloadIndex(present=False, valid=False, size_bytes=0, changed=before.present)
