"""``simpleworkflow.fastapi`` and the service of examples/fastapi_service.py, end to end
through the ASGI interface, with the worker in the service's process: an order and its run
commit together or not at all, the run's progress streams as Server-Sent Events, the API
and the dashboard answer behind the service's own auth dependency. Both stores."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import re
import sqlite3
import sys
import threading
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import httpx
import psycopg
import pytest
from conftest import Store
from fastapi import Depends, FastAPI, HTTPException, Request
from test_api_streams import events

from simpleworkflow import App, AsyncClient, Context, config, errors
from simpleworkflow.fastapi import Workflows

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "fastapi_service.py"
STAFF = {"X-Staff-Key": "let-me-in"}


def load_example() -> ModuleType:
    found = sys.modules.get("example_fastapi_service")
    if found is not None:
        return found
    spec = importlib.util.spec_from_file_location("example_fastapi_service", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(params=["sqlite", "postgres"])
def shop_store(request: pytest.FixtureRequest, tmp_path: Path) -> Store:
    """A database of the shop's own, empty: its tables and the store's go side by side."""
    if request.param == "sqlite":
        return Store("sqlite", f"sqlite:///{tmp_path / 'shop.db'}")
    make: Callable[[], str] = request.getfixturevalue("make_database")
    return Store("postgres", make())


def business(store: Store, statement: str) -> list[tuple[Any, ...]]:
    """Rows of the shop's own tables (outside the store's schema on Postgres)."""
    if store.kind == "sqlite":
        with sqlite3.connect(config.sqlite_path(store.url)) as lite:
            return [tuple(row) for row in lite.execute(statement)]
    with psycopg.connect(store.url, autocommit=True) as conn:
        return list(conn.execute(statement.encode()).fetchall())


async def serving(service: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    async with service.router.lifespan_context(service):
        transport = httpx.ASGITransport(app=service)
        async with httpx.AsyncClient(transport=transport, base_url="http://shop") as http:
            yield http


async def finished(http: httpx.AsyncClient, run_id: str) -> dict[str, Any]:
    """The run as the included API shows it, once it has ended (the worker stops with the
    service, so a test waits for it inside the lifespan)."""
    for _ in range(600):
        run = (await http.get(f"/workflows/api/v1/runs/{run_id}", headers=STAFF)).json()
        if run["status"] in ("succeeded", "failed", "cancelled"):
            return dict(run)
        await asyncio.sleep(0.05)
    raise AssertionError(f"run {run_id} did not end: {run}")


def shop(store: Store, scenario: Callable[[httpx.AsyncClient], Any]) -> Any:
    """Run ``scenario`` against the example's service on ``store``, inside its lifespan."""
    service = load_example().create_service(store.url)

    async def main() -> Any:
        async for http in serving(service):
            return await scenario(http)

    return asyncio.run(main())


def test_an_order_and_its_run_commit_together_and_its_progress_streams_as_events(
    shop_store: Store,
) -> None:
    async def scenario(http: httpx.AsyncClient) -> tuple[httpx.Response, httpx.Response, Any]:
        placed = await http.post("/orders", json={"id": "o-7", "items": ["tea", "cup"]})
        progress = await http.get("/orders/o-7/progress", timeout=60)
        run = await finished(http, placed.json()["run_id"])
        return placed, progress, run

    placed, progress, run = shop(shop_store, scenario)

    assert placed.status_code == 201, placed.text
    run_id = placed.json()["run_id"]
    assert business(shop_store, "select id, run_id from orders") == [("o-7", run_id)]
    assert len(business(shop_store, "select * from order_lines")) == 2
    assert progress.headers["content-type"].startswith("text/event-stream")
    got = events(progress.text)
    assert [json.loads(e["data"])["stage"] for e in got[:-1]] == ["reserved", "packed", "shipped"]
    assert got[-1]["event"] == "end"
    assert run["status"] == "succeeded", run
    assert run["result"] == {"order_id": "o-7", "lines": 2}


def test_an_order_that_fails_after_its_start_rolls_back_with_its_run(shop_store: Store) -> None:
    async def scenario(http: httpx.AsyncClient) -> tuple[httpx.Response, httpx.Response]:
        refused = await http.post("/orders", json={"id": "o-8", "items": ["tea", "tea"]})
        unknown = await http.get("/orders/o-8/progress")
        return refused, unknown

    refused, unknown = shop(shop_store, scenario)

    assert refused.status_code == 409, refused.text
    assert unknown.status_code == 404
    assert business(shop_store, "select * from orders") == []
    assert business(shop_store, "select * from order_lines") == []
    assert shop_store.count() == 0, "the run rolled back with the order"


def test_the_api_and_dashboard_answer_behind_the_service_s_own_dependency(
    shop_store: Store,
) -> None:
    async def scenario(http: httpx.AsyncClient) -> dict[str, int]:
        await http.post("/orders", json={"id": "o-9", "items": ["pot"]})
        return {
            "api, no key": (await http.get("/workflows/api/v1/runs")).status_code,
            "page, no key": (await http.get("/workflows/")).status_code,
            "api": (await http.get("/workflows/api/v1/runs", headers=STAFF)).status_code,
            "page": (await http.get("/workflows/runs", headers=STAFF)).status_code,
            "health stays the app's": (await http.get("/healthz")).status_code,
        }

    assert shop(shop_store, scenario) == {
        "api, no key": 403,
        "page, no key": 403,
        "api": 200,
        "page": 200,
        "health stays the app's": 404,
    }


def test_the_included_api_lists_the_run_the_endpoint_started(shop_store: Store) -> None:
    async def scenario(http: httpx.AsyncClient) -> tuple[str, Any]:
        placed = await http.post("/orders", json={"id": "o-10", "items": ["pot"]})
        listed = await http.get("/workflows/api/v1/runs", headers=STAFF)
        return placed.json()["run_id"], listed.json()

    run_id, listed = shop(shop_store, scenario)
    assert [run["id"] for run in listed["runs"]] == [run_id]


def test_the_client_dependency_refuses_outside_the_lifespan(store: Store) -> None:
    workflows = Workflows(App(store.url, schema=store.schema))
    with pytest.raises(errors.ConfigurationError, match="lifespan"):
        workflows.client()


def test_the_lifespan_hands_out_one_client_and_closes_it_and_the_worker(store: Store) -> None:
    app = App(store.url, schema=store.schema)
    seen: list[str] = []

    @app.workflow("test.fastapi.echo.v1")
    def echo(payload: Any, ctx: Context) -> Any:
        seen.append(payload["n"])
        return payload

    workflows = Workflows(app, worker=True, worker_options={"poll_interval": 0.1})
    service = FastAPI(lifespan=workflows.lifespan)

    @service.post("/echo/{n}")
    async def start(n: str, client: AsyncClient = Depends(workflows.client)) -> Any:
        run = await client.start("test.fastapi.echo.v1", {"n": n})
        return (await client.wait(run.id, timeout=30)).result

    async def main() -> Any:
        async for http in serving(service):
            return (await http.post("/echo/1")).json()

    assert asyncio.run(main()) == {"n": "1"}
    assert seen == ["1"]
    with pytest.raises(errors.ConfigurationError):
        workflows.client()


def test_a_worker_that_cannot_start_fails_the_application_s_startup(store: Store) -> None:
    workflows = Workflows(App(store.url, schema=store.schema), worker=True)

    async def main() -> None:
        async with workflows.lifespan():
            pass

    with pytest.raises(errors.ConfigurationError, match="no registered handler"):
        asyncio.run(main())


def test_a_prefix_that_is_not_a_path_is_refused(store: Store) -> None:
    workflows = Workflows(App(store.url, schema=store.schema))
    with pytest.raises(errors.InvalidArgument, match="prefix"):
        workflows.include(FastAPI(), prefix="workflows/")


def test_the_lifespan_may_run_again_as_each_test_client_runs_it(store: Store) -> None:
    """A module-level service is served once per test (``with TestClient(app)``): each
    time in a new event loop, on the same ``Workflows``."""
    workflows = Workflows(App(store.url, schema=store.schema))
    service = FastAPI(lifespan=workflows.lifespan)

    @service.post("/start")
    async def start(client: AsyncClient = Depends(workflows.client)) -> str:
        return (await client.start("test.fastapi.again.v1")).id

    async def main() -> str:
        async for http in serving(service):
            return str((await http.post("/start")).json())

    first, second = asyncio.run(main()), asyncio.run(main())
    with store.client() as client:
        assert [client.get(run_id).id for run_id in (first, second)] == [first, second]


def test_a_dashboard_form_acts_behind_the_service_s_dependency(store: Store) -> None:
    """The dashboard's forms keep their CSRF check under the service's own auth."""
    workflows = Workflows(App(store.url, schema=store.schema))
    service = FastAPI(lifespan=workflows.lifespan)

    async def staff_only(request: Request) -> None:
        if request.headers.get("x-staff-key") != STAFF["X-Staff-Key"]:
            raise HTTPException(403, "staff only")

    workflows.include(service, prefix="/ops", dependencies=[Depends(staff_only)])
    with store.client() as client:
        run_id = client.start("test.fastapi.form.v1").id

    async def main() -> tuple[int, int, int]:
        async for http in serving(service):
            page = await http.get(f"/ops/runs/{run_id}", headers=STAFF)
            token = re.search(r'name="csrf_token" value="([^"]+)"', page.text)
            assert token, page.text[:500]
            url = f"/ops/runs/{run_id}/cancel"
            forged = await http.post(url, data={"csrf_token": "forged"}, headers=STAFF)
            stranger = await http.post(url, data={"csrf_token": token.group(1)})
            done = await http.post(url, data={"csrf_token": token.group(1)}, headers=STAFF)
            return forged.status_code, stranger.status_code, done.status_code

    assert asyncio.run(main()) == (403, 403, 303)
    with store.client() as client:
        assert client.get(run_id).status.value == "cancelled"


def test_shutdown_lets_the_in_process_worker_finish_what_it_runs(store: Store) -> None:
    """The application stops only after its worker has finished the handler it was
    running (within the grace period), so that a deploy loses nothing."""
    app = App(store.url, schema=store.schema)
    started, finishing = threading.Event(), threading.Event()

    @app.workflow("test.fastapi.slow.v1")
    def slow(payload: Any, ctx: Context) -> Any:
        started.set()
        finishing.wait(5)  # until shutdown has begun
        return "finished"

    workflows = Workflows(app, worker=True, worker_options={"poll_interval": 0.1})
    service = FastAPI(lifespan=workflows.lifespan)

    async def main() -> str:
        async with service.router.lifespan_context(service):
            run = await workflows.client().start("test.fastapi.slow.v1")
            assert await asyncio.to_thread(started.wait, 30), "the worker never ran it"
            threading.Timer(0.5, finishing.set).start()  # it ends while the app stops
        assert finishing.is_set(), "the application stopped before its worker's handler"
        return run.id

    run_id = asyncio.run(main())
    with store.client() as client:
        run = client.get(run_id)
    assert (run.status.value, run.result) == ("succeeded", "finished")
