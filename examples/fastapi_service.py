"""A FastAPI shop service: an order and the run that fulfils it commit together, and the
order's progress is streamed to the browser as Server-Sent Events.

- ``POST /orders`` writes the order, starts its fulfilment run and writes the order's
  lines, all in ONE transaction of the service's database: a line that breaks a
  constraint (the same item twice) rolls back the order and the run together (409), and
  no worker ever hears of that run.
- ``GET /orders/{id}/progress`` follows the run's ``progress`` stream live.
- ``/workflows/`` serves the dashboard and ``/workflows/api/v1`` the HTTP API, behind the
  service's own auth dependency (a staff header here, a session in a real service).

A worker runs in the same process (``worker=True``): one process serves and works.

Run it end to end (in-process requests, on a throw-away SQLite file)::

    python examples/fastapi_service.py                       # or pass a database URL:
    python examples/fastapi_service.py postgresql://localhost/app

or serve it: ``SHOP_DATABASE_URL=sqlite:///shop.db uvicorn fastapi_service:service``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sqlite3
import sys
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import psycopg
from fastapi import Depends, FastAPI, Header, HTTPException
from pydantic import BaseModel
from starlette.responses import StreamingResponse

from simpleworkflow import App, AsyncClient, Context, config
from simpleworkflow.fastapi import Workflows, stream_events

FULFIL = "shop.order.fulfil.v1"
STAFF_KEY = "let-me-in"

app = App()


# [start workflow]
@app.workflow(FULFIL)
async def fulfil(payload: dict[str, Any], ctx: Context) -> dict[str, Any]:
    for stage in ("reserved", "packed", "shipped"):
        await ctx.step(stage, asyncio.sleep, 0.01)  # stands in for the real work
        await ctx.stream_append("progress", {"order": payload["order_id"], "stage": stage})
    await ctx.stream_close("progress")
    return {"order_id": payload["order_id"], "lines": payload["lines"]}


# [end workflow]


class OrderIn(BaseModel):
    id: str
    items: list[str]


class Orders:
    """The service's own tables, in the database that holds the workflow store: on
    Postgres through psycopg, on SQLite through ``sqlite3`` (placeholders differ)."""

    TABLES = (
        "create table if not exists orders (id text primary key, run_id text not null)",
        "create table if not exists order_lines (order_id text, item text, "
        "primary key (order_id, item))",
    )

    def __init__(self, database_url: str) -> None:
        self.url = database_url
        self.sqlite = database_url.startswith("sqlite:")

    def sql(self, statement: str) -> str:
        return statement if self.sqlite else statement.replace("?", "%s")

    @contextlib.asynccontextmanager
    async def transaction(self) -> AsyncIterator[Any]:
        """A connection inside one transaction: committed at the end, rolled back on a
        raise (a broken constraint becomes a 409)."""
        try:
            if self.sqlite:
                lite = sqlite3.connect(config.sqlite_path(self.url))
                try:
                    with lite:  # commits, or rolls back on a raise
                        yield lite
                finally:
                    lite.close()
            else:
                async with await psycopg.AsyncConnection.connect(self.url) as conn:
                    yield conn  # psycopg commits at the end, rolls back on a raise
        except (sqlite3.IntegrityError, psycopg.IntegrityError) as exc:
            raise HTTPException(409, f"the order breaks a constraint: {exc}") from None

    async def execute(self, conn: Any, statement: str, *params: Any) -> list[Any]:
        cursor = conn.execute(self.sql(statement), params)
        if not self.sqlite:
            cursor = await cursor
            return list(await cursor.fetchall()) if cursor.description else []
        return list(cursor.fetchall())

    async def create_tables(self) -> None:
        async with self.transaction() as conn:
            for statement in self.TABLES:
                await self.execute(conn, statement)


def create_service(database_url: str, schema: str | None = None) -> FastAPI:
    """The service on ``database_url`` (its tables and the workflow store side by side)."""
    workflows = Workflows(app, database_url=database_url, schema=schema, worker=True, migrate=True)
    orders = Orders(database_url)

    @contextlib.asynccontextmanager
    async def lifespan(service: FastAPI) -> AsyncIterator[None]:
        async with workflows.lifespan(service):
            await orders.create_tables()
            yield

    service = FastAPI(lifespan=lifespan)

    async def staff_only(x_staff_key: str | None = Header(default=None)) -> None:
        if x_staff_key != STAFF_KEY:  # a real service checks its own session here
            raise HTTPException(403, "staff only")

    workflows.include(service, prefix="/workflows", dependencies=[Depends(staff_only)])

    # [start place_order]
    @service.post("/orders", status_code=201)
    async def place_order(
        order: OrderIn, client: AsyncClient = Depends(workflows.client)
    ) -> dict[str, Any]:
        async with orders.transaction() as conn:  # one transaction: all or nothing
            run = await client.start(
                FULFIL,
                {"order_id": order.id, "lines": len(order.items)},
                idempotency_key=f"order:{order.id}",
                connection=conn,  # the run commits with the order, or not at all
            )
            await orders.execute(conn, "insert into orders values (?, ?)", order.id, run.id)
            for item in order.items:  # the same item twice breaks the primary key
                await orders.execute(conn, "insert into order_lines values (?, ?)", order.id, item)
        return {"order": order.id, "run_id": run.id}

    # [end place_order]

    @service.get("/orders/{order_id}/progress")
    async def progress(
        order_id: str, client: AsyncClient = Depends(workflows.client)
    ) -> StreamingResponse:
        async with orders.transaction() as conn:
            found = await orders.execute(conn, "select run_id from orders where id = ?", order_id)
        if not found:
            raise HTTPException(404, f"no order {order_id!r}")
        return stream_events(client, found[0][0], "progress")

    return service


async def shop(database_url: str, schema: str | None = None) -> tuple[str, str, str]:
    """Place an order through the service in this process and read its progress: the
    order's response, the Server-Sent Events streamed, and the run's final status."""
    service = create_service(database_url, schema)
    async with service.router.lifespan_context(service):
        transport = httpx.ASGITransport(app=service)
        async with httpx.AsyncClient(transport=transport, base_url="http://shop") as http:
            placed = await http.post("/orders", json={"id": "o-1", "items": ["tea", "cup"]})
            events = await http.get("/orders/o-1/progress", timeout=60)
            run_url = f"/workflows/api/v1/runs/{placed.json()['run_id']}"
            status = "running"
            while status not in ("succeeded", "failed", "cancelled"):  # the last step's commit
                await asyncio.sleep(0.05)
                status = (await http.get(run_url, headers={"X-Staff-Key": STAFF_KEY})).json()[
                    "status"
                ]
            return placed.text, events.text, status


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        url = sys.argv[1] if len(sys.argv) > 1 else f"sqlite:///{Path(tmp) / 'shop.db'}"
        placed, events, status = asyncio.run(shop(url))
    print(placed)
    print(events)
    print(f"fulfilment {status}")


# `uvicorn fastapi_service:service` serves the database that SHOP_DATABASE_URL names.
if "SHOP_DATABASE_URL" in os.environ:
    service = create_service(os.environ["SHOP_DATABASE_URL"])

if __name__ == "__main__":
    main()
