"""Schemas: migrating from nothing gives exactly the reference schema, on both stores;
migrate is idempotent and safe to run from several processes at once; the contract's
indexes and checks exist; clients refuse a missing or older Postgres schema."""

from __future__ import annotations

import asyncio
import multiprocessing
import re
import shutil
import sqlite3
import subprocess
import time
import uuid
from pathlib import Path
from typing import Any

import psycopg
import pytest
from conftest import Store, make_store

from simpleworkflow import config, errors
from simpleworkflow.backends import Backend, queries

VERSION_TABLE = "workflow_schema_version"


# -- looking at a schema --------------------------------------------------------------


def catalog(store: Store) -> dict[str, Any]:
    """Everything a schema defines, in a form two schemas can be compared by."""
    if store.kind == "sqlite":
        return _sqlite_catalog(config.sqlite_path(store.url))
    return _postgres_catalog(store.url, store.schema)


_PG_QUERIES = {
    "tables": """
        select table_name, table_type from information_schema.tables
        where table_schema = %(s)s order by 1""",
    "columns": """
        select table_name, column_name, data_type, udt_name, column_default, is_nullable,
               is_identity, identity_generation, character_maximum_length, numeric_precision
        from information_schema.columns
        where table_schema = %(s)s order by table_name, ordinal_position""",
    "indexes": """
        select tablename, indexname, indexdef from pg_indexes
        where schemaname = %(s)s order by 1, 2""",
    "constraints": """
        select cl.relname, co.conname, co.contype, pg_get_constraintdef(co.oid)
        from pg_constraint co join pg_class cl on cl.oid = co.conrelid
        where co.connamespace = %(s)s::regnamespace order by 1, 2""",
    "functions": """
        select proname, pg_get_functiondef(oid) from pg_proc
        where pronamespace = %(s)s::regnamespace order by 1""",
    "triggers": """
        select cl.relname, tg.tgname, pg_get_triggerdef(tg.oid)
        from pg_trigger tg join pg_class cl on cl.oid = tg.tgrelid
        where cl.relnamespace = %(s)s::regnamespace and not tg.tgisinternal order by 1, 2""",
    "sequences": """
        select sequence_name, data_type from information_schema.sequences
        where sequence_schema = %(s)s order by 1""",
}


def _postgres_catalog(url: str, schema: str) -> dict[str, Any]:
    # The schema name shows up in definitions ("ON t1.workflow_run ..."): take it out,
    # so two schemas built alike compare equal.
    qualified = re.compile(rf'"?\b{re.escape(schema)}\b"?\.')
    found: dict[str, Any] = {}
    with psycopg.connect(url) as conn:
        for name, query in _PG_QUERIES.items():
            rows = conn.execute(query.encode(), {"s": schema}).fetchall()
            found[name] = [
                tuple(qualified.sub("", v) if isinstance(v, str) else v for v in row)
                for row in rows
                if VERSION_TABLE not in row[0]
            ]
    return found


def _normalise_sql(sql: str) -> str:
    sql = re.sub(r"--[^\n]*", " ", sql)
    sql = re.sub(r"\s+", " ", sql)
    return re.sub(r"\s*([(),])\s*", r"\1", sql).strip().lower()


def _sqlite_catalog(path: str) -> dict[str, Any]:
    conn = sqlite3.connect(path)
    try:
        objects = conn.execute(
            "select type, name, tbl_name, sql from sqlite_master "
            "where name not like 'sqlite_%' and tbl_name != ? order by type, name",
            (VERSION_TABLE,),
        ).fetchall()
        found: dict[str, Any] = {
            "objects": [(t, n, tbl, _normalise_sql(sql or "")) for t, n, tbl, sql in objects]
        }
        for kind, name, _, _ in objects:
            if kind == "table":
                found[f"columns {name}"] = conn.execute(f"pragma table_xinfo('{name}')").fetchall()
                found[f"indexes {name}"] = conn.execute(f"pragma index_list('{name}')").fetchall()
                found[f"keys {name}"] = conn.execute(
                    f"pragma foreign_key_list('{name}')"
                ).fetchall()
            elif kind == "index":
                found[f"index {name}"] = conn.execute(f"pragma index_xinfo('{name}')").fetchall()
        return found
    finally:
        conn.close()


def migrate(store: Store) -> list[int]:
    backend = store.backend()
    try:
        return backend.migrate()
    finally:
        backend.close()


def sibling(store: Store, tmp_path: Path, request: pytest.FixtureRequest) -> Store:
    """Another empty store of the same kind, for a second schema to compare with."""
    if store.kind == "sqlite":
        return Store("sqlite", f"sqlite:///{tmp_path / 'other.db'}")
    return make_store("postgres", tmp_path, request)


def execute_script(store: Store, script: str) -> None:
    """Run a whole SQL script the way a team's own migration tool would."""
    if store.kind == "sqlite":
        lite = sqlite3.connect(config.sqlite_path(store.url), isolation_level=None)
        try:
            lite.executescript(script)
        finally:
            lite.close()
    else:
        with psycopg.connect(store.url, autocommit=True) as conn:
            conn.execute(script.encode())


def versions(store: Store) -> list[int]:
    return [row[0] for row in store.sql(f"select version from {VERSION_TABLE} order by version")]


def all_versions(store: Store) -> list[int]:
    """Every migration's version, in order (numbers may skip: a branch keeps its own)."""
    return [version for version, _ in queries.migration_files(store.backend().__module__)]


@pytest.fixture
def pg_empty(tmp_path: Path, request: pytest.FixtureRequest) -> Store:
    """An empty Postgres schema, for what only Postgres does."""
    return make_store("postgres", tmp_path, request)


@pytest.fixture
def pg_store(pg_empty: Store) -> Store:
    migrate(pg_empty)
    return pg_empty


# -- migrating from zero ----------------------------------------------------------------


def test_migrating_from_zero_gives_the_reference_schema(
    empty_store: Store, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    assert migrate(empty_store) == all_versions(empty_store)

    reference = sibling(empty_store, tmp_path, request)
    execute_script(reference, reference.backend().reference_schema_sql())

    migrated, expected = catalog(empty_store), catalog(reference)
    assert migrated["columns" if empty_store.kind == "postgres" else "objects"]
    for part in expected.keys() | migrated.keys():
        assert migrated.get(part) == expected.get(part), part


def test_migration_sql_script_gives_the_same_schema(
    empty_store: Store, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    script = empty_store.backend().migration_sql()
    execute_script(empty_store, script)
    assert versions(empty_store) == all_versions(empty_store)

    by_migrate = sibling(empty_store, tmp_path, request)
    migrate(by_migrate)
    assert catalog(empty_store) == catalog(by_migrate)
    # A schema applied by script is one `migrate` accepts as up to date.
    assert migrate(empty_store) == []


def test_migration_sql_runs_in_psql(
    pg_empty: Store, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    empty_store = pg_empty
    psql = _find_psql()
    script = tmp_path / "schema.sql"
    script.write_text(empty_store.backend().migration_sql())
    subprocess.run(
        [psql, "--no-psqlrc", "-v", "ON_ERROR_STOP=1", "-q", "-d", empty_store.url, "-f", script],
        check=True,
        capture_output=True,
    )
    by_migrate = sibling(empty_store, tmp_path, request)
    migrate(by_migrate)
    assert catalog(empty_store) == catalog(by_migrate)
    assert versions(empty_store) == all_versions(empty_store)


def _find_psql() -> str:
    try:
        import pgserver

        bundled = Path(pgserver.__file__).parent / "pginstall" / "bin" / "psql"
        if bundled.exists():
            return str(bundled)
    except ImportError:
        pass
    found = shutil.which("psql")
    if found is None:
        pytest.skip("no psql here")
    return found


def test_migrate_is_idempotent(empty_store: Store) -> None:
    assert migrate(empty_store) == all_versions(empty_store)
    assert migrate(empty_store) == []
    assert migrate(empty_store) == []
    assert versions(empty_store) == all_versions(empty_store)


def _migrate_in_process(url: str, schema: str, barrier: Any, results: Any) -> None:
    from simpleworkflow.backends import open_backend

    backend = open_backend(url, schema=schema)
    barrier.wait(timeout=60)
    try:
        results.put(("ok", backend.migrate()))
    except BaseException as exc:  # report it to the test instead of dying silently
        results.put(("error", f"{type(exc).__name__}: {exc}"))
    finally:
        backend.close()


def test_concurrent_migrations_apply_the_schema_once(
    empty_store: Store, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    ctx = multiprocessing.get_context("spawn")
    barrier, results = ctx.Barrier(4), ctx.Queue()
    processes = [
        ctx.Process(
            target=_migrate_in_process, args=(empty_store.url, empty_store.schema, barrier, results)
        )
        for _ in range(4)
    ]
    for process in processes:
        process.start()
    outcomes = [results.get(timeout=120) for _ in processes]
    for process in processes:
        process.join(timeout=60)
        assert process.exitcode == 0

    assert all(status == "ok" for status, _ in outcomes), outcomes
    applied = sorted((result for _, result in outcomes), key=len)
    assert applied == [[], [], [], all_versions(empty_store)]
    assert versions(empty_store) == all_versions(empty_store)

    reference = sibling(empty_store, tmp_path, request)
    migrate(reference)
    assert catalog(empty_store) == catalog(reference)


# -- the contract's indexes and checks --------------------------------------------------

SEED_COLUMNS = {
    "workflow_run": {
        "id": "uuid",
        "type": "text",
        "payload": "jsonb",
        "status": "text",
        "priority": "integer",
        "run_at": "timestamp with time zone",
        "idempotency_key": "text",
        "attempt": "integer",
        "max_attempts": "integer",
        "leased_by": "text",
        "lease_until": "timestamp with time zone",
        "last_error": "text",
        "result": "jsonb",
        "created_at": "timestamp with time zone",
        "updated_at": "timestamp with time zone",
        "deleted_at": "timestamp with time zone",
    },
    "workflow_event": {
        "id": "bigint",
        "workflow_id": "uuid",
        "event_type": "text",
        "data": "jsonb",
        "created_at": "timestamp with time zone",
    },
    "workflow_registry": {
        "workflow_name": "text",
        "intent_type": "text",
        "runtime": "text",
        "is_enabled": "boolean",
        "description": "text",
        "created_at": "timestamp with time zone",
        "updated_at": "timestamp with time zone",
    },
}


def test_postgres_has_the_seed_columns(pg_store: Store) -> None:
    store = pg_store
    columns: dict[str, dict[str, str]] = {}
    for table, column, data_type, _, default, *_ in catalog(store)["columns"]:
        columns.setdefault(table, {})[column] = data_type
        if (table, column) == ("workflow_run", "priority"):
            assert default == "100"
        if (table, column) == ("workflow_run", "status"):
            assert default == "'pending'::text"
        if (table, column) == ("workflow_registry", "intent_type"):
            assert default == "'workflow'::text"
    for table, expected in SEED_COLUMNS.items():
        # New capabilities may add columns; none of the seed's may change.
        assert {c: columns[table][c] for c in expected} == expected, table


def test_the_contract_indexes_exist(store: Store) -> None:
    if store.kind == "postgres":
        indexes = {name: sql for _, name, sql in catalog(store)["indexes"]}
    else:
        indexes = {name: sql for kind, name, _, sql in catalog(store)["objects"] if kind == "index"}
    claim = indexes["idx_workflow_run_claim"].lower()
    for column in ("priority", "run_at", "status"):
        assert column in claim
    assert "(idempotency_key)" in indexes["idx_workflow_run_idempotency"].lower()
    assert "unique" in indexes["idx_workflow_run_idempotency"].lower()
    assert "deleted_at" in indexes["idx_workflow_run_deleted_at"].lower()
    assert "(type" in indexes["idx_workflow_run_type_prefix"].lower()
    if store.kind == "postgres":
        assert "text_pattern_ops" in indexes["idx_workflow_run_type_prefix"]


def test_a_prefix_claim_can_use_the_type_index(pg_store: Store) -> None:
    """With text_pattern_ops, `type like 'billing.%'` is an index range scan."""
    store = pg_store
    with psycopg.connect(store.url) as conn:
        conn.execute(f'set search_path to "{store.schema}"'.encode())
        conn.execute("set enable_seqscan = off")
        plan = conn.execute(
            "explain select id from workflow_run where type like 'billing.%'"
        ).fetchall()
    assert "idx_workflow_run_type_prefix" in "\n".join(row[0] for row in plan)


@pytest.mark.parametrize("status", ["pending", "leased", "succeeded", "failed", "cancelled"])
def test_the_five_statuses_are_accepted(store: Store, status: str) -> None:
    store.sql("insert into workflow_run (type, status) values ('a.b.v1', ?)", status)
    assert store.count() == 1


@pytest.mark.parametrize("status", ["running", "PENDING", "", "done"])
def test_the_status_check_rejects_other_values(store: Store, status: str) -> None:
    with pytest.raises((psycopg.errors.CheckViolation, sqlite3.IntegrityError)):
        store.sql("insert into workflow_run (type, status) values ('a.b.v1', ?)", status)
    assert store.count() == 0


def test_the_idempotency_key_is_unique_in_the_table(store: Store) -> None:
    store.sql("insert into workflow_run (type, idempotency_key) values ('a.b.v1', 'k')")
    with pytest.raises((psycopg.errors.UniqueViolation, sqlite3.IntegrityError)):
        store.sql("insert into workflow_run (type, idempotency_key) values ('a.b.v1', 'k')")
    # ...while any number of runs may have no key.
    store.sql("insert into workflow_run (type) values ('a.b.v1')")
    store.sql("insert into workflow_run (type) values ('a.b.v1')")
    assert store.count() == 3


def test_runs_inserted_with_plain_sql_get_an_id_of_the_stores_default_kind(store: Store) -> None:
    # Postgres's default is time-ordered, like the ids the clients pick; SQLite's stays
    # random (changing a column default there means rebuilding the table).
    run_id = store.sql("insert into workflow_run (type) values ('a.b.v1') returning id")[0][0]
    found = uuid.UUID(str(run_id))
    assert found.version == (7 if store.kind == "postgres" else 4)
    if store.kind == "postgres":
        millis = int.from_bytes(found.bytes[:6], "big")
        assert abs(millis / 1000 - time.time()) < 60


def test_deleting_runs_deletes_their_events_and_journal_only(store: Store) -> None:
    with store.client() as client:
        gone, gone_too, kept = (client.start("a.b.v1") for _ in range(3))
    for run in (gone, gone_too, kept):
        store.sql(
            "insert into workflow_step (run_id, step_name, position) values (?, 'charge', 0)",
            run.id,
        )
    store.sql("delete from workflow_run where id in (?, ?)", gone.id, gone_too.id)
    assert store.count("workflow_event") == 1  # kept's created event
    assert store.count("workflow_step") == 1
    assert str(store.sql("select run_id from workflow_step")[0][0]) == kept.id


# -- clients and schema versions --------------------------------------------------------


def _schema_exists(store: Store) -> bool:
    with psycopg.connect(store.url) as conn:
        row = conn.execute(
            "select count(*) from information_schema.schemata where schema_name = %s",
            (store.schema,),
        ).fetchone()
    return bool(row and row[0])


@pytest.mark.parametrize("call", ["start", "get", "list"])
def test_a_client_on_an_unmigrated_postgres_says_to_migrate(pg_empty: Store, call: str) -> None:
    store = pg_empty
    arguments: dict[str, tuple[Any, ...]] = {
        "start": ("a.b.v1",),
        "get": ("00000000-0000-0000-0000-000000000000",),
        "list": (),
    }
    with (
        store.client() as client,
        pytest.raises(errors.SchemaError, match="simpleworkflow migrate"),
    ):
        getattr(client, call)(*arguments[call])

    async def via_async() -> None:
        async with store.async_client() as client:
            await getattr(client, call)(*arguments[call])

    with pytest.raises(errors.SchemaError, match="simpleworkflow migrate"):
        asyncio.run(via_async())
    assert not _schema_exists(store)  # nothing was created behind the user's back


def _make_older(store: Store) -> int:
    """Pretend the newest migration was never applied; return the version left."""
    *older, latest = all_versions(store)
    store.sql(f"delete from {VERSION_TABLE} where version = ?", latest)
    previous = older[-1] if older else latest - 1
    if not versions(store):
        store.sql(f"insert into {VERSION_TABLE} (version, name) values (?, 'older')", previous)
    return previous


def test_a_client_on_an_older_postgres_schema_says_it_is_older(pg_empty: Store) -> None:
    store = pg_empty
    migrate(store)
    older = _make_older(store)
    with store.client() as client:
        with pytest.raises(errors.SchemaError, match="older") as caught:
            client.start("a.b.v1")
        assert f"version {older}" in str(caught.value)
        assert "simpleworkflow migrate" in str(caught.value)
    assert store.count() == 0


def test_client_migrate_brings_postgres_up_to_date(pg_empty: Store) -> None:
    store = pg_empty
    with store.client() as client:
        assert client.migrate() == all_versions(store)
        assert client.migrate() == []
        run = client.start("a.b.v1")
        assert client.get(run.id).id == run.id


def test_sqlite_migrates_itself_on_first_use(tmp_path: Path) -> None:
    store = Store("sqlite", f"sqlite:///{tmp_path / 'fresh.db'}")
    with store.client() as client:
        run = client.start("a.b.v1")
        assert client.get(run.id).id == run.id
    assert versions(store) == all_versions(store)

    async def via_async() -> str:
        async with Store("sqlite", f"sqlite:///{tmp_path / 'fresh2.db'}").async_client() as c:
            return (await c.start("a.b.v1")).id

    assert asyncio.run(via_async())


def test_sqlite_upgrades_an_older_schema_on_first_use(tmp_path: Path) -> None:
    store = Store("sqlite", f"sqlite:///{tmp_path / 'old.db'}")
    backend: Backend = store.backend()
    try:
        backend.migrate()
    finally:
        backend.close()
    latest = store.backend().latest_version
    if latest < 2:
        pytest.skip("only one migration so far: nothing to upgrade from")
    # Rebuild the file at the previous version by applying every migration but the last.
    fresh = Store("sqlite", f"sqlite:///{tmp_path / 'older.db'}")
    script = fresh.backend().migration_sql()
    cut = script.index(f"-- migrations/{latest:04d}_")
    execute_script(fresh, script[:cut] + "\ncommit;\n")
    assert versions(fresh) == all_versions(fresh)[:-1]
    with fresh.client() as client:
        client.start("a.b.v1")
    assert versions(fresh) == all_versions(fresh)
    assert catalog(fresh) == catalog(store)


def test_the_chain_migration_leaves_older_runs_unlinked_and_links_new_chains(
    empty_store: Store,
) -> None:
    """Postgres 0026, SQLite 0020 (continue-as-new): runs written before it read as
    neither continued nor continuing; the links are plain columns, null by default."""
    store = empty_store
    script = store.backend().migration_sql()
    cut = script.index("_continue_as_new")
    cut = script.rindex("\n", 0, cut)
    execute_script(store, script[:cut] + "\ncommit;\n")
    old = store.sql("insert into workflow_run (type) values ('a.b.v1') returning id")[0][0]
    chain = 26 if store.kind == "postgres" else 20
    assert migrate(store) == [v for v in all_versions(store) if v >= chain]
    with store.client() as client:
        run = client.get(str(old))
        assert (run.continued_as, run.continued_from) == (None, None)
        new = client.start("a.b.v1")
        store.sql("update workflow_run set continued_as = ? where id = ?", new.id, str(old))
        store.sql("update workflow_run set continued_from = ? where id = ?", str(old), new.id)
        assert client.get(str(old)).continued_as == new.id
        assert client.get(new.id).continued_from == str(old)
