"""The application: handlers by workflow type, and the clients and workers made from them."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from simpleworkflow.handlers import Definition, Handlers, takes_context

if TYPE_CHECKING:
    from simpleworkflow.client import AsyncClient, Client
    from simpleworkflow.worker import IntentPoller

__all__ = ["App", "Definition", "takes_context"]


class App(Handlers):
    """Handlers by workflow type, plus the database they work against.

    ``database_url`` and ``schema`` default as everywhere (argument, environment, local
    SQLite file); a worker or client made from the app uses them. ``observers`` watch
    the runs of every worker and client made from the app (see ``observe``). ``codec``
    (a :class:`~simpleworkflow.codec.Codec`) writes datetimes, decimals, dataclasses ...
    in payloads, results and values, and its clients get it too (docs/payloads.md).

    The registration itself lives in :class:`~simpleworkflow.handlers.Handlers`, which
    the worker reads without importing this module (that would be a cycle).
    """

    def client(self) -> Client:
        """A :class:`~simpleworkflow.Client` on the app's database, watched by the app's
        observers (also those registered later) as well as by its own."""
        from simpleworkflow.client import Client

        return Client(
            self.database_url, schema=self.schema, observers=[self.observers], codec=self.codec
        )

    def async_client(self) -> AsyncClient:
        """An :class:`~simpleworkflow.AsyncClient`, as :meth:`client`."""
        from simpleworkflow.client import AsyncClient

        return AsyncClient(
            self.database_url, schema=self.schema, observers=[self.observers], codec=self.codec
        )

    def poller(self, **options: Any) -> IntentPoller:
        """An :class:`~simpleworkflow.worker.IntentPoller` for this app's handlers."""
        from simpleworkflow.worker import IntentPoller

        return IntentPoller(app=self, **options)
