"""The proxy's upstream pool: held-open GET streams never starve requests; finished answers keep their connection."""

from __future__ import annotations

import asyncio

import anyio
import pytest
from yarl import URL

from mcpfault.proxy.http.upstream import UpstreamPool

pytestmark = pytest.mark.anyio


class _Server:
    """A loopback HTTP/1.1 server: GET holds an SSE stream open until released; anything else answers JSON."""

    def __init__(self) -> None:
        self.connections = 0
        self.release = asyncio.Event()
        self.server: asyncio.Server | None = None

    async def __aenter__(self) -> URL:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        port = self.server.sockets[0].getsockname()[1]
        return URL(f"http://127.0.0.1:{port}/mcp")

    async def __aexit__(self, *exc_info: object) -> None:
        self.release.set()
        assert self.server is not None
        self.server.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while head := await reader.readuntil(b"\r\n\r\n"):
                method = head.split(b" ", 1)[0]
                length = next(
                    (
                        int(line.split(b":")[1])
                        for line in head.split(b"\r\n")
                        if line.lower().startswith(b"content-length")
                    ),
                    0,
                )
                await reader.readexactly(length)
                if method == b"GET":
                    writer.write(
                        b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
                    )
                    await writer.drain()
                    await self.release.wait()
                    return
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}")
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            return
        finally:
            writer.close()


async def test_held_open_get_streams_leave_the_pool_to_requests() -> None:
    async with _Server() as url:
        pool = UpstreamPool(url, max_connections=1)
        try:
            with anyio.fail_after(30):  # a hang guard: with streams counted against the limit, this waits forever
                streams = [await pool.request("GET", "/mcp", [], long_lived=True) for _ in range(3)]
                assert [stream.status for stream in streams] == [200, 200, 200]
                answer = await pool.request("POST", "/mcp", [], b"{}")  # not queued behind the streams
                assert await answer.body(1024) == b"{}"
            answer.release()
            for stream in streams:
                stream.close()
        finally:
            await pool.close()


async def test_an_answer_read_to_the_end_gives_its_connection_back() -> None:
    server = _Server()
    async with server as url:
        pool = UpstreamPool(url, max_connections=4)
        try:
            for method in ("DELETE", "POST", "POST"):
                answer = await pool.request(method, "/mcp", [], b"" if method == "DELETE" else b"{}")
                async for _chunk in answer.content.iter_any():
                    pass
                answer.release()
            assert server.connections == 1  # one kept-alive connection served all three
        finally:
            await pool.close()
