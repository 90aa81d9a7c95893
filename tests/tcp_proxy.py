"""A TCP proxy on 127.0.0.1 in front of the test Postgres that a test can make silent.

Three ways a network fails, as a worker sees them:

- :meth:`~SilentableProxy.silence`: its connections stay open, nothing it sends arrives,
  nothing comes back, and no error says so; bytes are lost for good. New connections are
  accepted and then hear nothing either.
- :meth:`~SilentableProxy.hold` then :meth:`~SilentableProxy.flow`: a partition that
  heals: nothing passes meanwhile, then everything held passes, in order (what TCP's
  retransmissions achieve).
- :meth:`~SilentableProxy.half_open`: the server's side of every open connection is gone
  (it rolls back what they left open) while the worker's side stays open and hears
  nothing, ever; new connections pass.

The chaos benchmark (``benchmarks/chaos_faults.py``) loads this file too.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable, Iterator
from urllib.parse import quote

import psycopg.conninfo


class _Pair:
    """One proxied connection: the client's side and the server's."""

    def __init__(self, client: asyncio.StreamWriter, server: asyncio.StreamWriter) -> None:
        self.client = client
        self.server = server
        self.cut = False  # half-open: the server's side is gone, the client's is not told


class SilentableProxy:
    """Forwards 127.0.0.1:``port`` to the server of ``url`` until told otherwise."""

    def __init__(self, url: str) -> None:
        self._info = psycopg.conninfo.conninfo_to_dict(url)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._server: asyncio.Server | None = None
        self.silent = threading.Event()
        self._flowing: asyncio.Event | None = None
        self._pairs: list[_Pair] = []
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

    def unsilence(self) -> None:
        """Pass bytes again (those swallowed meanwhile are lost)."""
        self.silent.clear()

    def hold(self) -> None:
        """Pass nothing until :meth:`flow`, losing nothing."""
        self._call(lambda: self._events().clear())

    def flow(self) -> None:
        """Pass again, what was held first."""
        self._call(lambda: self._events().set())

    def half_open(self) -> None:
        """Cut the server's side of every open connection, and tell the clients nothing."""

        def cut() -> None:
            for pair in self._pairs:
                pair.cut = True
                pair.server.close()
            self._pairs.clear()

        self._call(cut)

    def close(self) -> None:
        """Stop, and close every connection: the network is back, and they are gone."""

        async def stop() -> None:
            if self._server is not None:
                self._server.close()
            for pair in self._pairs:  # the server rolls back what they left open
                pair.client.close()
                pair.server.close()
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in tasks:  # the pumps of half-open connections, which never end
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        asyncio.run_coroutine_threadsafe(stop(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    def _call(self, change: Callable[[], None]) -> None:
        async def run() -> None:
            change()

        asyncio.run_coroutine_threadsafe(run(), self._loop).result(10)

    def _events(self) -> asyncio.Event:
        if self._flowing is None:
            self._flowing = asyncio.Event()
            self._flowing.set()
        return self._flowing

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
        try:
            up_reader, up_writer = await self._upstream()
        except OSError:  # the server is down (restarting): the client's connection fails
            writer.close()
            return
        pair = _Pair(writer, up_writer)
        self._pairs.append(pair)
        await asyncio.gather(
            self._pump(reader, up_writer, pair),
            self._pump(up_reader, writer, pair),
            return_exceptions=True,
        )
        if pair.cut:
            return  # the client's side stays open, and silent
        for w in (writer, up_writer):
            with contextlib.suppress(OSError):
                w.close()

    async def _pump(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, pair: _Pair
    ) -> None:
        with contextlib.suppress(ConnectionError):
            while data := await reader.read(65536):
                await self._events().wait()
                if self.silent.is_set() or pair.cut:
                    continue  # swallowed: the sender hears nothing, and no error either
                writer.write(data)
                await writer.drain()
        if not (self.silent.is_set() or pair.cut):
            writer.close()


@contextlib.contextmanager
def silentable_proxy(url: str) -> Iterator[SilentableProxy]:
    proxy = SilentableProxy(url)
    proxy.start()
    try:
        yield proxy
    finally:
        proxy.close()
