"""``manage.py check`` (and every command that runs the checks) refuses a
``settings.SIMPLEWORKFLOW`` that names no usable store, before a request or a worker
meets it."""

from __future__ import annotations

from typing import Any

from django.core import checks

from simpleworkflow import errors
from simpleworkflow.django import database


def settings_name_a_store(app_configs: Any = None, **kwargs: Any) -> list[Any]:
    """One error for a setting that does not name a store, saying which and why."""
    try:
        database.configured()
    except errors.ConfigurationError as exc:
        return [checks.Error(str(exc), id="simpleworkflow.E001")]
    return []
