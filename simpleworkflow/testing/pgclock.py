"""A test's clock on Postgres: a function ``now()`` that shadows ``pg_catalog.now()``.

Postgres looks a function name up along the session's ``search_path``, and searches
``pg_catalog`` first only when the path does not name it. The harness makes a schema of
its own holding ``now()`` (the server's ``pg_catalog.now()`` plus the offset in a one-row
table) and gives every connection of the test's store a URL whose ``options`` set the
path to that schema, then ``pg_catalog``: the store's statements and its PL/pgSQL
triggers then read the test's clock, and so do the column defaults of the tables the
harness's migration creates (a default is bound to the function found when the table is
made). ``clock_timestamp()`` (the time bits of run ids) and what other sessions of the
server do are left alone. The library's code does not change: only the URL does.
"""

from __future__ import annotations

from datetime import timedelta
from urllib.parse import parse_qsl, quote, urlencode, urlsplit, urlunsplit

from simpleworkflow.backends.queries import quote_schema

_SETUP = """
create schema {clock};
create table {clock}.offset_now (seconds double precision not null);
insert into {clock}.offset_now values (0);
create function {clock}.now() returns timestamptz
language sql stable parallel safe as $$
    select pg_catalog.now() + make_interval(secs => (select seconds from {clock}.offset_now))
$$;
"""


class PostgresClock:
    """The clock schema ``name`` on the server at ``url`` (a plain URL, not the rigged one)."""

    def __init__(self, url: str, name: str) -> None:
        self.url = url
        self.name = name
        self._quoted = quote_schema(name)

    def create(self) -> None:
        self._run(_SETUP.format(clock=self._quoted))

    def drop(self) -> None:
        self._run(f"drop schema if exists {self._quoted} cascade")

    def set_offset(self, offset: timedelta) -> None:
        self._run(f"update {self._quoted}.offset_now set seconds = %s", (offset.total_seconds(),))

    def wake(self, schema: str) -> None:
        """Wake the workers of ``schema``, as a trigger's notification does."""
        self._run("select pg_notify('simpleworkflow', %s)", (f"wake {schema} ",))

    def rigged_url(self) -> str:
        """``url`` with the search path that puts this clock's ``now()`` first."""
        parts = urlsplit(self.url)
        query = dict(parse_qsl(parts.query))
        path = f"-c search_path={self.name},pg_catalog,public"
        query["options"] = f"{query['options']} {path}" if query.get("options") else path
        return urlunsplit(parts._replace(query=urlencode(query, quote_via=quote)))

    def _run(self, sql: str, params: tuple[object, ...] | None = None) -> None:
        import psycopg

        with psycopg.connect(self.url, autocommit=True) as conn:
            conn.execute(sql.encode(), params)
