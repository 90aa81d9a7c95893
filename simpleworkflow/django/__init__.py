"""Workflows inside a Django project: runs started in Django's own transaction, a worker
run by ``manage.py``, the dashboard beside the site.

Add ``"simpleworkflow.django"`` to ``INSTALLED_APPS``; the store is in Django's own
database unless ``settings.SIMPLEWORKFLOW`` says otherwise (:mod:`.database`). Then:

- :func:`start` starts a run on Django's connection: inside ``transaction.atomic()`` it
  commits with what the ORM wrote there, or rolls back with it; :func:`connection` gives
  that connection to any other call of the client (``signal``, ``publish``...);
- ``python manage.py simpleworkflow_worker myproject.workflows:app`` runs a worker, with
  the options of ``simpleworkflow worker``, on the project's store;
- :func:`simpleworkflow.django.asgi.mount` serves the dashboard and the HTTP API under a
  prefix of the project's ASGI application.

On Postgres this needs Django's psycopg (3) backend: with psycopg2 there is no psycopg 3
connection to share. See docs/frameworks.md.
"""

from __future__ import annotations

from typing import Any

from simpleworkflow import errors
from simpleworkflow.client import Client
from simpleworkflow.models import Run

__all__ = ["client", "connection", "start"]


def client(using: str | None = None) -> Client:
    """The project's ``Client`` (on the configured alias's store, or on ``using``'s)."""
    from django.apps import apps

    if not apps.is_installed("simpleworkflow.django"):
        raise errors.ConfigurationError(
            'add "simpleworkflow.django" to settings.INSTALLED_APPS to use its client'
        )
    made: Client = apps.get_app_config("simpleworkflow").client(using)
    return made


def connection(using: str | None = None) -> Any:
    """The driver connection under Django's connection to the store's database (a
    ``psycopg.Connection`` or a ``sqlite3.Connection``), opened if need be, for a
    client call's ``connection=``: the call joins Django's transaction there."""
    from django.db import connections

    from simpleworkflow.django import database

    alias = database.configured(using).alias
    wrapper = connections[alias]
    wrapper.ensure_connection()
    return wrapper.connection


def start(type: str, payload: Any = None, *, using: str | None = None, **options: Any) -> Run:
    """Start a run on Django's connection, in its transaction: inside
    ``transaction.atomic()`` the run exists once that block commits, and never if it
    rolls back; outside one (Django's autocommit) it is committed at once. ``options``
    are ``Client.start``'s (``idempotency_key``, ``delay``...)."""
    return client(using).start(type, payload, connection=connection(using), **options)
