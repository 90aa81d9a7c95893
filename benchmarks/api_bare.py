"""The same start as ``POST /api/v1/runs`` by a server with nothing else in it: the ceiling
of an HTTP start on this stack, for ``benchmarks.api`` to measure beside ``serve``.

``python -m benchmarks.api_bare`` (Postgres only; the store from
``$SIMPLEWORKFLOW_DATABASE_URL`` and ``$SIMPLEWORKFLOW_SCHEMA``) serves a bare ASGI
callable, no framework and no middleware, under uvicorn with what ``serve`` gives it
(uvloop and httptools by uvicorn's ``auto``, the one-write protocol of
``server/one_write.py``). A request's JSON body is read, the run inserted by the very
statement ``AsyncClient.start`` sends (the backend's ``create_run`` with its parameters
encoded by the backend) on a connection of a psycopg ``AsyncConnectionPool``, and the
answer is 201 with a JSON body of the keys ``serve`` answers with. Nothing is checked:
no auth, hosts, body limit, validation, idempotency or deadline, which is the point.
``GET /readyz`` answers 200 once the pool is open.

``--through-client``: the run is started by ``AsyncClient.start`` instead (its task and
deadline, the op, the ``Run``), answered by ``bodies.started`` as ``serve`` answers it:
what ``serve`` spends beyond that is its app's (FastAPI, the guard, the start lane, the
registry's warnings).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
from typing import Any

import psycopg_pool
import uvicorn
from psycopg.rows import dict_row
from starlette.types import Receive, Scope, Send

from simpleworkflow import AsyncClient, names
from simpleworkflow.backends.records import NewRun
from simpleworkflow.models import iso
from simpleworkflow.server import bodies, one_write

#: The keys of ``serve``'s answer to a start (``bodies.started``), in its order; the
#: values a fresh run has that the request and the row do not give.
ANSWER: dict[str, Any] = {
    "id": None, "type": None, "payload": None, "status": "pending", "priority": 100,
    "run_at": None, "idempotency_key": None, "failed_attempts": 0, "max_attempts": 3,
    "leased_by": None, "lease_until": None, "last_error": None, "result": None,
    "created_at": None, "updated_at": None, "deleted_at": None, "waiting_for": None,
    "parent_id": None, "deadline": None, "code_version": None, "trace_context": None,
    "retention": None, "concurrency_key": None, "continued_as": None,
    "continued_from": None, "forked_from": None, "forked_at_step": None, "created": True,
    "attempts_made": 0, "waiting_states": [], "lease_expired": False, "warnings": [],
}  # fmt: skip
_TYPE = (b"content-type", b"application/json")


class BareStart:
    """The ASGI app: ``POST`` inserts a run, ``GET /readyz`` says whether the pool is
    open, anything else 404."""

    def __init__(self, url: str, schema: str, *, through_client: bool = False) -> None:
        self.client = AsyncClient(url, schema=schema)
        self.through_client = through_client
        self.url = url
        self.pool: psycopg_pool.AsyncConnectionPool[Any] | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self.lifespan(receive, send)
        elif scope["method"] == "POST":
            await self.start(scope, receive, send)
        else:
            ready = scope["path"] == "/readyz" and self.pool is not None
            await _answer(send, 200 if ready else 404, b"{}")

    async def lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                self.pool = psycopg_pool.AsyncConnectionPool(
                    self.url, min_size=1, max_size=4, kwargs={"autocommit": True}, open=False
                )
                await self.pool.open(wait=True)
                await send({"type": "lifespan.startup.complete"})
            else:
                if self.pool is not None:
                    await self.pool.close()
                await send({"type": "lifespan.shutdown.complete"})
                return

    async def start(self, scope: Scope, receive: Receive, send: Send) -> None:
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        asked = json.loads(body)
        if self.through_client:
            run = await self.client.start(asked["type"], asked.get("payload"))
            await bodies.respond(bodies.started(run, []), 201)(scope, receive, send)
            return
        new = NewRun(asked["type"], json.dumps(asked.get("payload")))
        run_id = names.new_run_id()
        statement = self.client.backend.stmt("create_run", id=run_id, **new.params())
        assert self.pool is not None
        conn = await self.pool.getconn()
        try:
            cursor = conn.cursor(row_factory=dict_row)
            await cursor.execute(statement.sql, statement.params)
            row = await cursor.fetchone()
        finally:
            await self.pool.putconn(conn)
        assert row is not None
        created = iso(row["created_at"])
        answer = {
            **ANSWER,
            "id": run_id,
            "type": new.type,
            "payload": asked.get("payload"),
            "run_at": iso(row["run_at"]),
            "created_at": created,
            "updated_at": created,
            "deadline": iso(row["deadline"]),
            "retention": row["retention"],
        }
        await _answer(send, 201, json.dumps(answer, separators=(",", ":")).encode())


async def _answer(send: Send, status: int, body: bytes) -> None:
    head = [(b"content-length", str(len(body)).encode()), _TYPE]
    await send({"type": "http.response.start", "status": status, "headers": head})
    await send({"type": "http.response.body", "body": body})


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.api_bare", description=__doc__)
    parser.add_argument("--through-client", action="store_true", help="AsyncClient.start")
    args = parser.parse_args(argv)
    url, schema = os.environ["SIMPLEWORKFLOW_DATABASE_URL"], os.environ["SIMPLEWORKFLOW_SCHEMA"]
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(2048)
    port = sock.getsockname()[1]
    print(f"serving the API on http://127.0.0.1:{port}/api/v1 (bare start)", flush=True)
    config = uvicorn.Config(
        BareStart(url, schema, through_client=args.through_client),
        log_level="warning",
        access_log=False,
        http=one_write.OneWriteProtocol,
        lifespan="on",
    )
    uvicorn.Server(config).run(sockets=[sock])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
