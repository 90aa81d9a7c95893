"""The transport ``simpleworkflow serve`` gives uvicorn (``server.one_write``): what is
written in one turn of the event loop goes out as one write, nothing is held longer."""

from __future__ import annotations

import asyncio
from typing import Any

from simpleworkflow.server.one_write import GatheredWrites


class Recorded:
    """A transport that keeps what it is asked to do."""

    def __init__(self) -> None:
        self.writes: list[bytes] = []
        self.calls: list[str] = []
        self.closing = False

    def write(self, data: bytes) -> None:
        assert not self.closing, "written after the close"
        self.writes.append(data)
        self.calls.append("write")

    def close(self) -> None:
        self.closing = True
        self.calls.append("close")

    def abort(self) -> None:
        self.closing = True
        self.calls.append("abort")

    def is_closing(self) -> bool:
        return self.closing

    def get_write_buffer_size(self) -> int:
        return 0

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"peername": ("127.0.0.1", 5)}.get(name, default)


def gathered() -> tuple[GatheredWrites, Recorded]:
    sent = Recorded()
    return GatheredWrites(sent, asyncio.get_running_loop()), sent  # type: ignore[arg-type]


def test_an_answers_head_and_body_go_out_in_one_write() -> None:
    async def answer() -> list[bytes]:
        transport, sent = gathered()
        transport.write(b"HTTP/1.1 201 Created\r\n\r\n")
        transport.write(b'{"id":')
        transport.write(memoryview(b'"r1"}'))
        assert sent.writes == [] and transport.get_write_buffer_size() == 35
        await asyncio.sleep(0)
        return sent.writes

    assert asyncio.run(answer()) == [b'HTTP/1.1 201 Created\r\n\r\n{"id":"r1"}']


def test_what_a_later_turn_writes_goes_out_at_the_end_of_that_turn() -> None:
    """A stream's head is not held until its first event."""

    async def stream() -> list[list[bytes]]:
        transport, sent = gathered()
        seen = []
        for chunk in (b"head", b"event 1", b"event 2"):
            transport.write(chunk)
            await asyncio.sleep(0)
            seen.append(list(sent.writes))
        return seen

    assert asyncio.run(stream()) == [
        [b"head"],
        [b"head", b"event 1"],
        [b"head", b"event 1", b"event 2"],
    ]


def test_closing_sends_what_is_held_first_and_an_abort_drops_it() -> None:
    async def close(how: str) -> list[str]:
        transport, sent = gathered()
        transport.write(b"HTTP/1.1 400 Bad Request\r\n\r\n")
        getattr(transport, how)()
        await asyncio.sleep(0)  # the turn's end finds nothing more to send
        return sent.calls

    assert asyncio.run(close("close")) == ["write", "close"]
    assert asyncio.run(close("abort")) == ["abort"]


def test_a_transport_closed_meanwhile_gets_nothing_and_others_pass_through() -> None:
    async def closed() -> tuple[list[bytes], Any]:
        transport, sent = gathered()
        transport.write(b"late")
        sent.closing = True  # the peer went away before the turn ended
        await asyncio.sleep(0)
        return sent.writes, transport.get_extra_info("peername")

    assert asyncio.run(closed()) == ([], ("127.0.0.1", 5))
