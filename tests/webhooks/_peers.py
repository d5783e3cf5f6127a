"""Receivers that misbehave, on loopback, served by the test's own event loop: one that answers a huge body, one that
answers a gzip bomb, one that trickles its answer a byte at a time when the test says so, one that holds every
request until the test releases it, and one that answers at once. Each records the requests' headers, how many were
under way at once, and whether the sender closed a connection before the answer was complete.

Everything is bounded: a body is at most `size` bytes, streamed from one preallocated chunk; a trickle is at most
`length` bytes; a held request waits for an event the test sets before the block ends."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import zlib
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass, field

CHUNK = 64 * 1024
_CHUNK_BYTES = b"a" * CHUNK


@dataclass
class Peer:
    """What a receiver was sent and what it saw: `requests` (each request's headers, lower-cased), `most` requests
    under way at once, `closed` set when the sender hung up before the answer was complete."""

    url: str = ""
    requests: list[dict[str, str]] = field(default_factory=list)
    under_way: int = 0
    most: int = 0
    arrived: asyncio.Event = field(default_factory=asyncio.Event)
    closed: asyncio.Event = field(default_factory=asyncio.Event)
    release: asyncio.Event = field(default_factory=asyncio.Event)
    tokens: asyncio.Queue[None] = field(default_factory=asyncio.Queue)
    changed: asyncio.Event = field(default_factory=asyncio.Event)

    def _changed(self) -> None:
        self.changed.set()
        self.changed = asyncio.Event()

    async def until(self, check: Callable[[], bool]) -> None:
        """Wait until `check()` holds (the caller bounds the wait with a deadline)."""
        while not check():
            await self.changed.wait()

    async def trickle_one(self) -> None:
        """Let the trickler send one more byte; return once it was written, or the sender hung up."""
        written = self.changed
        self.tokens.put_nowait(None)
        await written.wait()


Answer = Callable[[Peer, asyncio.StreamReader, asyncio.StreamWriter], Awaitable[bool]]


async def _hung_up(reader: asyncio.StreamReader) -> None:
    while await reader.read(CHUNK):
        pass


def _head(status: int, *headers: tuple[str, str | int]) -> bytes:
    lines = [f"HTTP/1.1 {status} X"] + [f"{name}: {value}" for name, value in headers]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


async def at_once(peer: Peer, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
    writer.write(_head(204))
    await writer.drain()
    return True


async def held(peer: Peer, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
    await peer.release.wait()
    return await at_once(peer, reader, writer)


def huge(size: int) -> Answer:
    """A 200 whose body is `size` bytes, written as fast as the sender reads it."""

    async def answer(peer: Peer, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        writer.write(_head(200, ("content-length", size), ("content-type", "application/json")))
        sent = 0
        try:
            while sent < size:
                writer.write(_CHUNK_BYTES[: min(CHUNK, size - sent)])
                await writer.drain()
                sent += CHUNK
        except ConnectionError:
            return False
        return True

    return answer


def gzip_bomb(inflated: int) -> tuple[Answer, int]:
    """A 200 whose body is `inflated` zero bytes gzipped (about a thousandth of it), sent whatever the request's
    `Accept-Encoding` said; and the compressed size."""
    packer = zlib.compressobj(9, zlib.DEFLATED, 31)
    zeros = bytes(1024 * 1024)
    parts = [packer.compress(zeros) for _ in range(inflated // len(zeros))]
    body = b"".join(parts) + packer.flush()

    async def answer(peer: Peer, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        head = _head(200, ("content-length", len(body)), ("content-encoding", "gzip"))
        try:
            for start in range(0, len(body), CHUNK):
                writer.write((head if start == 0 else b"") + body[start : start + CHUNK])
                await writer.drain()
        except ConnectionError:
            return False
        return True

    return answer, len(body)


def trickle(length: int) -> Answer:
    """A 200 that announces `length` bytes of body and sends one each time the test calls `trickle_one`."""

    async def answer(peer: Peer, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        writer.write(_head(200, ("content-length", length)))
        await writer.drain()
        hung_up = asyncio.ensure_future(_hung_up(reader))
        try:
            for _ in range(length):
                token = asyncio.ensure_future(peer.tokens.get())
                await asyncio.wait({hung_up, token}, return_when=asyncio.FIRST_COMPLETED)
                if hung_up.done():
                    token.cancel()
                    return False
                writer.write(b"x")
                await writer.drain()
                peer._changed()
        except ConnectionError:
            return False
        finally:
            hung_up.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await hung_up
        return True

    return answer


@contextlib.asynccontextmanager
async def serving(answer: Answer) -> AsyncIterator[Peer]:
    """A receiver on 127.0.0.1 answering every POST with `answer`, until the block ends; `peer.url` is its URL."""
    peer = Peer()

    async def connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, ConnectionError):
                    return
                lines = head.decode("latin-1").split("\r\n")[1:]
                headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines if line)}
                await reader.readexactly(int(headers.get("content-length", "0")))
                peer.requests.append(headers)
                peer.under_way += 1
                peer.most = max(peer.most, peer.under_way)
                peer.arrived.set()
                peer._changed()
                try:
                    complete = await answer(peer, reader, writer)
                finally:
                    peer.under_way -= 1
                    peer._changed()
                if not complete:
                    peer.closed.set()
                    peer._changed()
                    return
        finally:
            writer.close()

    server = await asyncio.start_server(connection, "127.0.0.1", 0)
    peer.url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/hooks"
    try:
        yield peer
    finally:
        peer.release.set()
        server.close()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(server.wait_closed(), 5)


class _Settled(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.count = 0
        self.changed = asyncio.Event()

    def emit(self, record: logging.LogRecord) -> None:
        if record.getMessage().startswith("askback webhook msg_"):
            self.count += 1
            self.changed.set()
            self.changed = asyncio.Event()

    async def until(self, count: int) -> None:
        """Wait until `count` attempts were recorded (the caller bounds the wait with a deadline)."""
        while self.count < count:
            await self.changed.wait()


@contextlib.contextmanager
def settled() -> Iterator[_Settled]:
    """Counts the attempts the dispatcher recorded, from the line it logs for each."""
    handler = _Settled()
    logger = logging.getLogger("askback.webhooks")
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        yield handler
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
