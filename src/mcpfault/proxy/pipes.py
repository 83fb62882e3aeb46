"""Byte streams over the proxy's own stdin and stdout, as anyio streams.

anyio wraps a child's pipes but not our own file descriptors. Pipes, sockets and terminals go
through the event loop; a regular file (``mcpfault proxy < requests.jsonl``) cannot be polled, so
it is read and written in a worker thread instead.
"""

from __future__ import annotations

import asyncio
import os
import stat

import anyio
from anyio.abc import ByteReceiveStream, ByteSendStream

CHUNK = 1 << 16


class _LoopReader(ByteReceiveStream):
    def __init__(self, reader: asyncio.StreamReader, transport: asyncio.ReadTransport) -> None:
        self._reader = reader
        self._transport = transport

    async def receive(self, max_bytes: int = CHUNK) -> bytes:
        data = await self._reader.read(max_bytes)
        if not data:
            raise anyio.EndOfStream
        return data

    async def aclose(self) -> None:
        self._transport.close()


class _LoopWriter(ByteSendStream):
    def __init__(self, writer: asyncio.StreamWriter) -> None:
        self._writer = writer

    async def send(self, item: bytes) -> None:
        if self._writer.is_closing():
            raise anyio.BrokenResourceError("the peer closed its end of the pipe")
        self._writer.write(item)
        # Only wait when the kernel pipe is full: a drain per message would cost a loop round trip.
        if self._writer.transport.get_write_buffer_size() > CHUNK:
            try:
                await self._writer.drain()
            except (BrokenPipeError, ConnectionResetError) as exc:
                raise anyio.BrokenResourceError(str(exc)) from exc

    async def aclose(self) -> None:
        self._writer.close()


class _ThreadReader(ByteReceiveStream):
    def __init__(self, fd: int) -> None:
        self._fd = fd

    async def receive(self, max_bytes: int = CHUNK) -> bytes:
        data = await anyio.to_thread.run_sync(os.read, self._fd, max_bytes, abandon_on_cancel=True)
        if not data:
            raise anyio.EndOfStream
        return data

    async def aclose(self) -> None:
        pass


class _ThreadWriter(ByteSendStream):
    def __init__(self, fd: int) -> None:
        self._fd = fd

    async def send(self, item: bytes) -> None:
        view = memoryview(item)
        try:
            while view:
                written = os.write(self._fd, view)  # regular files do not block for long
                view = view[written:]
        except OSError as exc:
            raise anyio.BrokenResourceError(str(exc)) from exc

    async def aclose(self) -> None:
        pass


def _pollable(fd: int) -> bool:
    mode = os.fstat(fd).st_mode
    return stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode) or stat.S_ISCHR(mode)


async def open_reader(fd: int) -> ByteReceiveStream:
    if not _pollable(fd):
        return _ThreadReader(fd)
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=CHUNK, loop=loop)
    # closefd=False: the descriptor belongs to the process, not to this stream.
    pipe = os.fdopen(fd, "rb", buffering=0, closefd=False)
    transport, _ = await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader, loop=loop), pipe)
    return _LoopReader(reader, transport)


async def open_writer(fd: int) -> ByteSendStream:
    if not _pollable(fd):
        return _ThreadWriter(fd)
    loop = asyncio.get_running_loop()
    pipe = os.fdopen(fd, "wb", buffering=0, closefd=False)
    transport, protocol = await loop.connect_write_pipe(lambda: asyncio.streams.FlowControlMixin(loop=loop), pipe)
    return _LoopWriter(asyncio.StreamWriter(transport, protocol, None, loop))


class LineSplitter:
    """Cuts a byte stream into newline-terminated lines, of any length."""

    def __init__(self) -> None:
        self._parts: list[bytes] = []

    def feed(self, chunk: bytes) -> list[bytes]:
        lines: list[bytes] = []
        start = 0
        while (end := chunk.find(b"\n", start)) >= 0:
            if self._parts:
                self._parts.append(chunk[start : end + 1])
                lines.append(b"".join(self._parts))
                self._parts.clear()
            else:
                lines.append(chunk if start == 0 and end == len(chunk) - 1 else chunk[start : end + 1])
            start = end + 1
        if start < len(chunk):
            self._parts.append(chunk[start:] if start else chunk)
        return lines

    def rest(self) -> bytes:
        """What came after the last newline (a partial line at EOF)."""
        rest = b"".join(self._parts)
        self._parts.clear()
        return rest
