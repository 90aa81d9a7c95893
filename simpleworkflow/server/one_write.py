"""uvicorn's HTTP protocol, with the writes of one turn of the event loop sent as one.

uvicorn writes an answer's head and its body with a ``write`` each: two system calls,
and on a loopback or LAN socket with ``TCP_NODELAY`` two segments, each through the
whole TCP stack of both ends (the reader's too, on loopback). A start over HTTP answers
in one turn of the loop, so the transport handed to uvicorn here holds what is written
until the end of that turn and sends it with one ``write``: about 10 µs of the server's
CPU per answer (docs/performance.md, "The API's start, sixth pass"). Nothing waits
longer than the turn: a stream's event written in a later turn goes out at the end of
that turn, and closing sends what is held first.
"""

from __future__ import annotations

import asyncio
from typing import Any

from uvicorn.protocols.http.auto import AutoHTTPProtocol


class GatheredWrites:
    """A transport that sends the bytes written in one turn of the loop with one
    ``write`` on ``transport``; every other call goes to ``transport`` (what is held is
    sent first where order matters)."""

    __slots__ = ("_held", "_loop", "_transport")

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self._transport = transport
        self._loop = loop
        self._held: list[bytes] = []

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if not data:
            return
        if not self._held:
            self._loop.call_soon(self.flush)
        self._held.append(bytes(data))

    def writelines(self, lines: Any) -> None:
        for data in lines:
            self.write(data)

    def flush(self) -> None:
        """Send what is held (a transport that is closing drops it, as its own
        ``write`` would have after the close)."""
        held = self._held
        if not held:
            return
        self._held = []
        if not self._transport.is_closing():
            self._transport.write(held[0] if len(held) == 1 else b"".join(held))

    def write_eof(self) -> None:
        self.flush()
        self._transport.write_eof()

    def close(self) -> None:
        self.flush()
        self._transport.close()

    def abort(self) -> None:
        self._held = []
        self._transport.abort()

    def is_closing(self) -> bool:
        return self._transport.is_closing()

    def get_write_buffer_size(self) -> int:
        return self._transport.get_write_buffer_size() + sum(map(len, self._held))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


class OneWriteProtocol(AutoHTTPProtocol):  # type: ignore[misc,valid-type]
    """The HTTP protocol uvicorn would pick (httptools when installed, else h11), on a
    :class:`GatheredWrites` transport."""

    def connection_made(self, transport: asyncio.Transport) -> None:
        gathered: Any = GatheredWrites(transport, asyncio.get_running_loop())
        super().connection_made(gathered)
