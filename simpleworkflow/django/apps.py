"""The Django app of simpleworkflow: ``INSTALLED_APPS = [..., "simpleworkflow.django"]``."""

from __future__ import annotations

import threading
from typing import Any

from django.apps import AppConfig

from simpleworkflow.client import Client
from simpleworkflow.django import database


class SimpleWorkflowConfig(AppConfig):
    """Holds the project's clients, one per database alias, made on first use."""

    name = "simpleworkflow.django"
    label = "simpleworkflow"
    verbose_name = "simpleworkflow"
    default_auto_field = "django.db.models.BigAutoField"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._clients: dict[str | None, Client] = {}
        self._lock = threading.Lock()

    def ready(self) -> None:
        from django.core import checks

        from simpleworkflow.django.checks import settings_name_a_store

        checks.register(settings_name_a_store)

    def client(self, using: str | None = None) -> Client:
        """The ``Client`` of the store on alias ``using`` (default: the configured one)."""
        with self._lock:
            found = self._clients.get(using)
            if found is None:
                store = database.configured(using)
                found = self._clients[using] = Client(store.url, schema=store.schema)
            return found
