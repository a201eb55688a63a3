"""Moving bytes for the egress proxy (``toolhub.sandbox.egress.proxy``): a connection to a server
with the record its bytes are counted in, one HTTP message body copied as it is framed, and the
waiting and cancelling of the two directions of a relay. Standard library only."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

CHUNK = 64 * 1024


@dataclass
class HostRecord:
    """What the report says of one host:port: the addresses used, connections and bytes."""

    host: str
    port: int
    addresses: set[str] = field(default_factory=set)
    connections: int = 0
    bytes_in: int = 0
    bytes_out: int = 0


@dataclass
class Upstream:
    """One connection to a server, and the record its bytes are added to."""

    record: HostRecord
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter


async def copy_body(
    reader: asyncio.StreamReader,
    send: Callable[[bytes], Awaitable[None]],
    framing: str,
    length: int,
) -> None:
    """Copy one message body as it is framed (bytes unchanged), stopping right after it."""
    if framing == "length":
        while length > 0:
            chunk = await reader.read(min(length, CHUNK))
            if not chunk:
                raise asyncio.IncompleteReadError(b"", length)
            length -= len(chunk)
            await send(chunk)
    elif framing == "chunked":
        while True:
            size_line = await reader.readuntil(b"\r\n")
            size_text = size_line.split(b";", 1)[0].strip()
            if not re.fullmatch(rb"[0-9a-fA-F]{1,16}", size_text):
                raise ConnectionError("invalid chunk size")
            await send(size_line)
            size = int(size_text, 16)
            if size == 0:
                # Trailer fields, then the empty line that ends the message.
                while (line := await reader.readuntil(b"\r\n")) != b"\r\n":
                    await send(line)
                await send(b"\r\n")
                return
            remaining = size + 2
            while remaining > 0:
                data = await reader.readexactly(min(remaining, CHUNK))
                remaining -= len(data)
                await send(data)


@dataclass
class Progress:
    """How far a forwarded request got: once its response head was sent, an error can no
    longer be answered with a status of its own."""

    method: str
    sent_head: bool = False


async def until_done(main: asyncio.Future[None], helper: asyncio.Future[None]) -> None:
    """Wait for `main`; raise at once if either future fails (the helper may finish first)."""
    pending: set[asyncio.Future[None]] = {main, helper}
    while main in pending:
        done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
        for future in done:
            if not future.cancelled() and future.exception() is not None:
                raise future.exception()  # type: ignore[misc]


async def cancel_all(*futures: asyncio.Future[None] | None) -> None:
    """Cancel the futures that exist and wait until each has ended."""
    running = [f for f in futures if f is not None]
    for future in running:
        future.cancel()
    await asyncio.gather(*running, return_exceptions=True)
