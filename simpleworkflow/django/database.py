"""Which store a Django project's workflows use: Django's own database by default.

``settings.SIMPLEWORKFLOW`` (all optional)::

    SIMPLEWORKFLOW = {
        "DATABASE": "default",   # the alias of DATABASES whose database holds the store
        "DATABASE_URL": None,    # else the URL is made from that alias's settings
        "SCHEMA": None,          # the Postgres schema (default: as everywhere, "workflow")
        "APP": None,             # "myproject.workflows:app", the worker command's default
    }

The URL is made from the alias's ``ENGINE``: ``django.db.backends.postgresql`` gives a
``postgresql://`` URL of its ``NAME``, ``USER``, ``PASSWORD``, ``HOST``, ``PORT`` and the
libpq keys of its ``OPTIONS``; ``django.db.backends.sqlite3`` gives ``sqlite:///`` and
its file. A start inside Django's transaction (:func:`simpleworkflow.django.start`) runs on
that alias's connection, so the store must be in that database.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urlencode

from django.conf import settings

from simpleworkflow import errors

#: The keys ``settings.SIMPLEWORKFLOW`` may hold.
KEYS = ("DATABASE", "DATABASE_URL", "SCHEMA", "APP")
#: ``OPTIONS`` of a Postgres alias that are libpq's, and so go into the URL; the others
#: (``pool``, ``server_side_binding``, ``isolation_level``...) are Django's own.
LIBPQ_OPTIONS = frozenset(
    {
        "sslmode",
        "sslrootcert",
        "sslcert",
        "sslkey",
        "sslpassword",
        "connect_timeout",
        "application_name",
        "options",
        "target_session_attrs",
        "service",
        "passfile",
        "keepalives",
        "keepalives_idle",
        "keepalives_interval",
        "keepalives_count",
    }
)
POSTGRES_ENGINES = frozenset(
    {"django.db.backends.postgresql", "django.contrib.gis.db.backends.postgis"}
)
SQLITE_ENGINES = frozenset(
    {"django.db.backends.sqlite3", "django.contrib.gis.db.backends.spatialite"}
)


@dataclass(frozen=True, slots=True)
class Store:
    """Where the workflows are: the Django alias whose connection starts join, the URL
    of its database, the schema."""

    alias: str
    url: str
    schema: str | None
    app: str | None


def configured(using: str | None = None) -> Store:
    """The store ``settings.SIMPLEWORKFLOW`` names, on alias ``using`` if given."""
    given = getattr(settings, "SIMPLEWORKFLOW", None) or {}
    if not isinstance(given, dict):
        raise errors.ConfigurationError(
            f"settings.SIMPLEWORKFLOW must be a dict, not {type(given).__name__}"
        )
    unknown = sorted(set(given) - set(KEYS))
    if unknown:
        raise errors.ConfigurationError(
            f"settings.SIMPLEWORKFLOW has unknown keys {unknown}; it takes {', '.join(KEYS)}"
        )
    alias = using or given.get("DATABASE") or "default"
    url = given.get("DATABASE_URL") if using is None else None
    return Store(
        alias=alias,
        url=url or database_url(alias),
        schema=given.get("SCHEMA"),
        app=given.get("APP"),
    )


def database_url(alias: str = "default") -> str:
    """The URL of the database of Django's alias ``alias``."""
    databases: dict[str, Any] = settings.DATABASES
    if alias not in databases:
        raise errors.ConfigurationError(
            f"settings.SIMPLEWORKFLOW names database {alias!r}, which settings.DATABASES "
            f"lacks; it has {', '.join(sorted(databases)) or 'none'}"
        )
    entry = databases[alias]
    engine = entry.get("ENGINE", "")
    if engine in POSTGRES_ENGINES:
        return _postgres_url(entry)
    if engine in SQLITE_ENGINES:
        return _sqlite_url(alias, entry)
    raise errors.ConfigurationError(
        f"DATABASES[{alias!r}] uses {engine!r}: simpleworkflow's stores are Postgres "
        "(django.db.backends.postgresql) and SQLite (django.db.backends.sqlite3); set "
        "SIMPLEWORKFLOW['DATABASE_URL'] to keep the workflows in another database"
    )


def _postgres_url(entry: dict[str, Any]) -> str:
    user = quote(str(entry.get("USER") or ""), safe="")
    password = entry.get("PASSWORD")
    credentials = f"{user}:{quote(str(password), safe='')}@" if password else f"{user}@"
    host = str(entry.get("HOST") or "")
    port = str(entry.get("PORT") or "")
    query: dict[str, str] = {}
    if host.startswith("/"):  # a Unix socket's directory
        query["host"], host = host, ""
    where = f"[{host}]" if ":" in host else host
    netloc = f"{credentials if user or password else ''}{where}{':' + port if port else ''}"
    options = entry.get("OPTIONS") or {}
    query.update({k: str(v) for k, v in options.items() if k in LIBPQ_OPTIONS})
    name = quote(str(entry.get("NAME") or ""), safe="")
    return f"postgresql://{netloc}/{name}" + (f"?{urlencode(query)}" if query else "")


def _sqlite_url(alias: str, entry: dict[str, Any]) -> str:
    name = str(entry.get("NAME") or "")
    if not name or name == ":memory:" or name.startswith("file:"):
        raise errors.ConfigurationError(
            f"DATABASES[{alias!r}] is an in-memory SQLite database ({name or 'no NAME'}), "
            "which no worker can share: give it a file"
        )
    return f"sqlite:///{os.path.abspath(name)}"
