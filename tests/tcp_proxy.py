"""A TCP proxy on 127.0.0.1 in front of the test Postgres that a test can make silent.

Silent means what a network partition looks like from a worker: its connections stay
open, nothing it sends arrives, nothing comes back, and no error says so. New
connections are accepted and then hear nothing either.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Iterator
from urllib.parse import quote

import psycopg.conninfo


class SilentableProxy:
    """Forwards 127.0.0.1:``port`` to the server of ``url`` until :meth:`silence`."""

    def __init__(self, url: str) -> None:
        self._info = psycopg.conninfo.conninfo_to_dict(url)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._server: asyncio.Server | None = None
        self.silent = threading.Event()
        self._writers: list[asyncio.StreamWriter] = []
        self.port = 0

    @property
    def url(self) -> str:
        """``url`` through this proxy."""
        user = quote(str(self._info.get("user", "postgres")))
        password = self._info.get("password")
        auth = f"{user}:{quote(str(password))}" if password else user
        dbname = quote(str(self._info.get("dbname", "postgres")))
        return f"postgresql://{auth}@127.0.0.1:{self.port}/{dbname}"

    def start(self) -> None:
        self._thread.start()
        future = asyncio.run_coroutine_threadsafe(self._listen(), self._loop)
        self.port = future.result(10)

    def silence(self) -> None:
        self.silent.set()

    def close(self) -> None:
        """Stop, and close every connection: the network is back, and they are gone."""

        async def stop() -> None:
            if self._server is not None:
                self._server.close()
            for writer in self._writers:  # the server rolls back what they left open
                writer.close()

        asyncio.run_coroutine_threadsafe(stop(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    async def _listen(self) -> int:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return int(self._server.sockets[0].getsockname()[1])

    async def _upstream(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        host = str(self._info.get("host") or "/tmp")
        port = int(self._info.get("port") or 5432)
        if host.startswith("/"):
            return await asyncio.open_unix_connection(f"{host}/.s.PGSQL.{port}")
        return await asyncio.open_connection(host, port)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await self._upstream()
        self._writers += [writer, up_writer]
        await asyncio.gather(
            self._pump(reader, up_writer), self._pump(up_reader, writer), return_exceptions=True
        )
        for w in (writer, up_writer):
            with contextlib.suppress(OSError):
                w.close()

    async def _pump(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while data := await reader.read(65536):
            if self.silent.is_set():
                continue  # swallowed: the sender hears nothing, and no error either
            writer.write(data)
            await writer.drain()
        if not self.silent.is_set():
            writer.close()


@contextlib.contextmanager
def silentable_proxy(url: str) -> Iterator[SilentableProxy]:
    proxy = SilentableProxy(url)
    proxy.start()
    try:
        yield proxy
    finally:
        proxy.close()
