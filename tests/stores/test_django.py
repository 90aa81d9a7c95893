"""``simpleworkflow.django`` in a real Django project (tests/django_project), in this
process: an order saved with the ORM and its run started in one ``transaction.atomic()``
commit together or roll back together, on Django's SQLite connection (alias ``default``)
and on its psycopg 3 one (alias ``other``, Postgres); the store's URL made from Django's
settings; the dashboard and the API mounted beside Django's pages. The worker command runs
in tests/processes/test_django_worker.py."""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
from conftest import Store

from simpleworkflow import errors
from simpleworkflow.models import RunStatus
from simpleworkflow.server import Auth

django = pytest.importorskip("django")

SHIP = "shop.order.ship.v1"
TOKEN = "a-token-for-the-django-tests"
STORES: dict[str, Store] = {}  # Django is set up once per process, on these


@pytest.fixture(scope="module")
def stores(
    tmp_path_factory: pytest.TempPathFactory, make_database: Callable[[], str]
) -> dict[str, Store]:
    """The project's two databases by alias, each holding a migrated store and the shop's
    table: ``default`` on SQLite, ``other`` on Postgres (a database of its own)."""
    if STORES:
        return STORES
    sqlite = Store("sqlite", f"sqlite:///{tmp_path_factory.mktemp('django') / 'shop.db'}")
    postgres = Store("postgres", make_database())
    env = {
        "DJANGO_SETTINGS_MODULE": "django_project.settings",
        "SHOP_DATABASE_URL": sqlite.url,
        "SHOP_OTHER_DATABASE_URL": postgres.url,
    }
    saved = {name: os.environ.get(name) for name in env}
    os.environ.update(env)
    try:
        django.setup()
    finally:  # the settings are read: leave no trace for other tests' subprocesses
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
    from django.db import connections
    from django_project.shop.models import Order

    for alias, store in (("default", sqlite), ("other", postgres)):
        store.migrate()
        with connections[alias].schema_editor() as editor:
            editor.create_model(Order)
    STORES.update(default=sqlite, other=postgres)
    return STORES


@pytest.fixture(params=["default", "other"])
def alias(request: pytest.FixtureRequest, stores: dict[str, Store]) -> Iterator[str]:
    yield request.param
    from django.db import connections

    connections[request.param].close()  # as Django does at the end of a request


def orders(alias: str, item: str) -> list[tuple[str, str]]:
    from django_project.shop.models import Order

    return list(Order.objects.using(alias).filter(item=item).values_list("item", "status"))


def unique() -> str:
    return f"item-{uuid.uuid4().hex[:8]}"


def test_an_order_and_its_run_commit_together_in_atomic(
    alias: str, stores: dict[str, Store]
) -> None:
    from django.db import transaction
    from django_project.shop.models import Order

    import simpleworkflow.django

    item = unique()
    with stores[alias].client() as outside, transaction.atomic(using=alias):
        order = Order.objects.using(alias).create(item=item)
        run = simpleworkflow.django.start(SHIP, {"order_id": order.pk}, using=alias)
        with pytest.raises(errors.RunNotFound):
            outside.get(run.id)  # not committed yet: only Django's connection sees it

    assert orders(alias, item) == [(item, "new")]
    with stores[alias].client() as client:
        assert client.get(run.id).status is RunStatus.PENDING
        assert client.get(run.id).payload == {"order_id": order.pk}


def test_an_order_and_its_run_roll_back_together_when_atomic_raises(
    alias: str, stores: dict[str, Store]
) -> None:
    from django.db import transaction
    from django_project.shop.models import Order

    import simpleworkflow.django

    item, key = unique(), unique()
    with pytest.raises(RuntimeError, match="payment refused"), transaction.atomic(using=alias):
        order = Order.objects.using(alias).create(item=item)
        run = simpleworkflow.django.start(
            SHIP, {"order_id": order.pk}, using=alias, idempotency_key=key
        )
        raise RuntimeError("payment refused")

    assert orders(alias, item) == []
    with stores[alias].client() as client, pytest.raises(errors.RunNotFound):
        client.get(run.id)
    assert (
        stores[alias].sql("select count(*) from workflow_run where idempotency_key = ?", key)[0][0]
        == 0
    )


def test_a_start_outside_atomic_commits_at_once(alias: str, stores: dict[str, Store]) -> None:
    import simpleworkflow.django

    run = simpleworkflow.django.start(SHIP, {"order_id": 0}, using=alias)
    with stores[alias].client() as client:
        assert client.get(run.id).id == run.id


def test_a_signal_joins_django_s_transaction_through_connection(
    alias: str, stores: dict[str, Store]
) -> None:
    from django.db import transaction

    import simpleworkflow.django

    run = simpleworkflow.django.start(SHIP, {"order_id": 0}, using=alias)
    client = simpleworkflow.django.client(alias)
    with pytest.raises(RuntimeError), transaction.atomic(using=alias):
        connection = simpleworkflow.django.connection(alias)
        client.signal(run.id, "paid", {"ok": True}, connection=connection)
        raise RuntimeError("rolled back")
    count = "select count(*) from workflow_signal where run_id = ?"
    assert stores[alias].sql(count, run.id)[0][0] == 0
    with transaction.atomic(using=alias):
        client.signal(
            run.id, "paid", {"ok": True}, connection=simpleworkflow.django.connection(alias)
        )
    assert stores[alias].sql(count, run.id)[0][0] == 1


def test_the_store_url_is_made_from_django_s_database_settings(
    stores: dict[str, Store],
) -> None:
    from simpleworkflow.django import database

    assert database.database_url("default") == stores["default"].url
    made = database.database_url("other")
    assert made.startswith("postgresql://")
    with psycopg.connect(made) as conn, psycopg.connect(stores["other"].url) as theirs:
        ours = conn.execute("select current_database(), inet_server_port()").fetchone()
        assert ours == theirs.execute("select current_database(), inet_server_port()").fetchone()
    assert database.configured().alias == "default"
    assert database.configured("other").url == made


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        ({"DATABASE": "missing"}, "settings.DATABASES lacks"),
        ({"DATABSE": "default"}, "unknown keys"),
        ("default", "must be a dict"),
    ],
)
def test_bad_settings_are_refused_naming_the_setting(
    stores: dict[str, Store], setting: Any, message: str
) -> None:
    from django.test import override_settings

    from simpleworkflow.django import database

    with (
        override_settings(SIMPLEWORKFLOW=setting),
        pytest.raises(errors.ConfigurationError, match=message),
    ):
        database.configured()


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ({"ENGINE": "django.db.backends.mysql", "NAME": "shop"}, "stores are Postgres"),
        ({"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"}, "in-memory"),
    ],
)
def test_a_database_that_cannot_hold_the_store_is_refused(
    stores: dict[str, Store], entry: dict[str, str], message: str
) -> None:
    from django.conf import settings

    from simpleworkflow.django import database

    settings.DATABASES["elsewhere"] = entry
    try:
        with pytest.raises(errors.ConfigurationError, match=message):
            database.database_url("elsewhere")
    finally:
        del settings.DATABASES["elsewhere"]


def test_a_postgres_url_carries_sockets_ports_passwords_and_libpq_options() -> None:
    from simpleworkflow.django import database

    entry = {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": "shop db",
        "USER": "app",
        "PASSWORD": "p@ss/word",
        "HOST": "db.internal",
        "PORT": 5433,
        "OPTIONS": {"sslmode": "require", "server_side_binding": True},
    }
    assert database._postgres_url(entry) == (
        "postgresql://app:p%40ss%2Fword@db.internal:5433/shop%20db?sslmode=require"
    )
    socket = {**entry, "HOST": "/run/postgresql", "PASSWORD": "", "PORT": "", "OPTIONS": {}}
    assert database._postgres_url(socket) == (
        "postgresql://app@/shop%20db?host=%2Frun%2Fpostgresql"
    )


def test_the_dashboard_and_api_are_mounted_beside_django_s_pages(
    alias: str, stores: dict[str, Store]
) -> None:
    from django.core.asgi import get_asgi_application
    from django.test import override_settings

    import simpleworkflow.django
    from simpleworkflow.django.asgi import mount

    with override_settings(SIMPLEWORKFLOW={"DATABASE": alias}):
        run = simpleworkflow.django.start(SHIP, {"order_id": 0}, using=alias)
        site = mount(get_asgi_application(), prefix="/workflows", auth=Auth(token=TOKEN))

    async def visit() -> dict[str, Any]:
        transport = httpx.ASGITransport(app=site)
        bearer = {"Authorization": f"Bearer {TOKEN}"}
        async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as http:
            page = await http.get("/orders/")
            refused = await http.get("/workflows/api/v1/runs")
            listed = await http.get(f"/workflows/api/v1/runs/{run.id}", headers=bearer)
            dashboard = await http.get("/workflows/runs", headers=bearer)
        return {
            "django": (page.status_code, page.text.endswith("orders")),
            "api without a token": refused.status_code,
            "api": (listed.status_code, listed.json().get("id")),
            "dashboard": (dashboard.status_code, run.id[:8] in dashboard.text),
        }

    assert asyncio.run(visit()) == {
        "django": (200, True),
        "api without a token": 401,
        "api": (200, run.id),
        "dashboard": (200, True),
    }


def test_a_prefix_that_is_not_a_path_is_refused(stores: dict[str, Store]) -> None:
    from simpleworkflow.django.asgi import Mounted

    with pytest.raises(errors.InvalidArgument, match="prefix"):
        Mounted(lambda *a: None, lambda *a: None, "/workflows/")  # type: ignore[arg-type]


def test_the_app_must_be_installed_for_its_client(stores: dict[str, Store], tmp_path: Path) -> None:
    from django.test import override_settings

    import simpleworkflow.django

    with (
        override_settings(INSTALLED_APPS=["django_project.shop"]),
        pytest.raises(errors.ConfigurationError, match="INSTALLED_APPS"),
    ):
        simpleworkflow.django.client()


def test_manage_py_check_refuses_settings_that_name_no_store(stores: dict[str, Store]) -> None:
    from django.core import checks
    from django.test import override_settings

    assert [e.id for e in checks.run_checks() if e.id.startswith("simpleworkflow")] == []
    with override_settings(SIMPLEWORKFLOW={"DATABASE": "missing"}):
        found = [e for e in checks.run_checks() if e.id.startswith("simpleworkflow")]
    assert [(e.id, "lacks" in e.msg) for e in found] == [("simpleworkflow.E001", True)]
