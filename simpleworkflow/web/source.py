"""Where the API's endpoints and the dashboard's pages get their client: one given by the
application, or one the server opens itself, on first use, in the event loop that serves
(an ``AsyncClient``'s connections belong to the loop that opened them)."""

from __future__ import annotations

from collections.abc import Iterable

from simpleworkflow import observe
from simpleworkflow.admin import unclaimed
from simpleworkflow.client import AsyncClient


class ClientSource:
    """The ``AsyncClient`` every endpoint acts through, and the registry as last read
    (``registry``), which the starts' warnings share."""

    def __init__(
        self,
        client: AsyncClient | None = None,
        *,
        database_url: str | None = None,
        schema: str | None = None,
        observers: Iterable[observe.Observer] = (),
    ) -> None:
        if client is not None and (database_url is not None or schema is not None):
            raise TypeError("give a client, or a database_url and schema, not both")
        self._observers = list(observers)
        if client is not None:
            for observer in self._observers:
                client.observe(observer)
        self._client = client
        self._owned = client is None
        self._url = database_url
        self._schema = schema
        self.registry = unclaimed.RegistryView()

    @property
    def client(self) -> AsyncClient:
        if self._client is None:
            # Opening connects to nothing yet; the first call does, in the running loop.
            self._client = AsyncClient(self._url, schema=self._schema, observers=self._observers)
        return self._client

    async def aclose(self) -> None:
        """Close the client if this source opened it; the application closes its own."""
        if self._owned and self._client is not None:
            client, self._client = self._client, None
            await client.aclose()
