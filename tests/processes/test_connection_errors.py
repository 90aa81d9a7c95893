"""A Postgres URL that cannot work fails at once, in one line, with the server's reason.

Every entry point opens its first connection the same way: the commands an operator runs
(the real console script, in a subprocess), and the clients' first call. Passwords in the
URL, in its user info or its query string, never reach the terminal.
"""

from __future__ import annotations

import asyncio
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest
from conftest import with_database

from simpleworkflow import AsyncClient, Client, config, errors

SCRIPT = Path(sys.executable).with_name("simpleworkflow")
SECRET = "hunter2-secret"
APP_MODULE = """
from simpleworkflow import App

app = App()


@app.workflow("billing.invoice.v1")
def invoice(payload):
    return payload
"""


def with_query(url: str, **params: str) -> str:
    """``url`` with these query parameters added."""
    parts = urlsplit(url)
    extra = "&".join(f"{key}={value}" for key, value in params.items())
    return urlunsplit(parts._replace(query=f"{parts.query}&{extra}" if parts.query else extra))


def with_user(url: str, user: str, password: str) -> str:
    parts = urlsplit(url)
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit(parts._replace(netloc=f"{user}:{password}@{host}"))


#: A wrong URL, made from the test server's, and (a pattern of) what the server or libpq
#: says about it.
WRONG_URLS: dict[str, tuple[Callable[[str], str], str]] = {
    "unknown database": (lambda url: with_database(url, "no_such_db"), '"no_such_db" does not'),
    "missing role": (lambda url: with_user(url, "no_such_role", SECRET), '"no_such_role" does'),
    "wrong port": (lambda url: with_query(url, port="1"), r'(port 1|PGSQL\.1") failed'),
    "bad sslmode": (lambda url: with_query(url, sslmode="bogus"), "invalid sslmode value"),
}


def console(*argv: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(SCRIPT), *argv], cwd=cwd, capture_output=True, text=True, timeout=60, check=False
    )


@pytest.mark.parametrize("wrong", WRONG_URLS.values(), ids=WRONG_URLS.keys())
@pytest.mark.parametrize(
    "command",
    [("runs", "list"), ("start", "billing.invoice.v1"), ("worker", "jobs:app"), ("migrate",)],
    ids=["runs list", "start", "worker", "migrate"],
)
def test_every_command_names_the_cause_in_one_line(
    postgres_url: str,
    tmp_path: Path,
    command: tuple[str, ...],
    wrong: tuple[Callable[[str], str], str],
) -> None:
    make_url, reason = wrong
    url = with_query(make_url(postgres_url), password=SECRET)
    (tmp_path / "jobs.py").write_text(APP_MODULE)
    done = console("-d", url, *command, cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    assert done.stdout == ""
    # One line: no log lines of the connection pool, no traceback.
    assert done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.startswith("simpleworkflow: error: cannot connect to Postgres at ")
    assert re.search(reason, done.stderr), done.stderr
    assert "Check the URL" in done.stderr
    assert SECRET not in done.stderr
    assert "password=***" in done.stderr


def test_a_url_libpq_cannot_read_is_a_configuration_error(
    postgres_url: str, tmp_path: Path
) -> None:
    done = console("-d", with_query(postgres_url, bogus="1"), "runs", "list", cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1
    assert done.stderr.startswith("simpleworkflow: error: cannot use the Postgres URL ")
    assert 'invalid URI query parameter: "bogus"' in done.stderr


def test_the_client_raises_store_unavailable_with_its_cause(postgres_url: str) -> None:
    url = with_user(with_database(postgres_url, "no_such_db"), "postgres", SECRET)
    with Client(url) as client, pytest.raises(errors.StoreUnavailable) as caught:
        client.list()
    assert isinstance(caught.value.__cause__, psycopg.OperationalError)
    assert '"no_such_db" does not exist' in str(caught.value)
    assert SECRET not in str(caught.value)


def test_the_async_client_raises_store_unavailable_with_its_cause(postgres_url: str) -> None:
    async def first_call() -> None:
        async with AsyncClient(with_database(postgres_url, "no_such_db")) as client:
            await client.get("00000000-0000-4000-8000-000000000000")

    with pytest.raises(errors.StoreUnavailable) as caught:
        asyncio.run(first_call())
    assert isinstance(caught.value.__cause__, psycopg.OperationalError)
    assert '"no_such_db" does not exist' in str(caught.value)


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("postgresql://app:s3cret@db:5432/prod", "postgresql://app:***@db:5432/prod"),
        ("postgresql://app@db/prod?password=s3cret", "postgresql://app@db/prod?password=***"),
        (
            "postgresql://app:s3cret@db/prod?sslmode=require&sslpassword=s3cret&PASSWORD=s3cret",
            "postgresql://app:***@db/prod?sslmode=require&sslpassword=***&PASSWORD=***",
        ),
        ("postgresql://a:b@c@db/prod", "postgresql://a:***@db/prod"),
        ("postgresql:///prod?host=/run/pg&password=s3cret", "postgresql:///prod?host=/run/pg&password=***"),
        ("postgresql://app@db/prod", "postgresql://app@db/prod"),
        ("sqlite:///runs.db?synchronous=normal", "sqlite:///runs.db?synchronous=normal"),
    ],
)  # fmt: skip
def test_mask_url_hides_every_password(url: str, shown: str) -> None:
    assert config.mask_url(url) == shown


def test_an_unknown_scheme_does_not_show_the_password() -> None:
    with pytest.raises(errors.ConfigurationError) as caught:
        config.scheme("mysql://app:s3cret@db/prod")
    assert "s3cret" not in str(caught.value)
