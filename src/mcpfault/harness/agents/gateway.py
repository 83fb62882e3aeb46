"""The external agent's MCP endpoint: Streamable HTTP on loopback, every request sent on through the harness's client.

An external agent (``--agent cmd:NAME``) is a process of its own, so the harness cannot call tools for
it. It gets this endpoint instead (``MCPFAULT_MCP_URL``). Each request it sends goes on through the
session's own client (``StdioClient`` or ``HttpClient``) into the proxy, so it becomes an attempt like a
built-in agent's: recorded with its task, on a CLIENT span under the task's span, its trace context in
``params._meta``. The judge then joins and judges it exactly as it does the scripted agents' requests.

What the proxy's faults did comes back to the agent as near to the wire as the client lets it:

- an answer (a JSON-RPC error or a tool's ``isError`` included) goes back as it came;
- an HTTP error status (over ``--transport http``) goes back with its status and ``Retry-After``;
- a stream cut or a reset closes the agent's connection with no response;
- a request the proxy never answered waits until the agent gives up (closes its connection) or its
  task's time runs out: the gateway's deadline is the agent's, not the built-in agents' ``--deadline``;
- an answer the client could not parse comes back as JSON-RPC error -32603 naming what was wrong.

The agent's ``initialize`` is answered from the session's own handshake, so every task of a session
meets the same server session and the same world, as the scripted agents do. The agent speaks the
legacy era (2025-11-25) to this endpoint whatever era the session's client speaks to the proxy: under
``--era modern`` its ``initialize`` gets the session's ``server/discover`` answer as an initialize
result (the same capabilities and server), and its requests go on in the client's era. A GET
(server-to-client stream) is refused with 405, which the transport allows.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from mcpfault.errors import (
    CallError,
    CallTimeout,
    HttpStatusError,
    MalformedResponse,
    ProtocolError,
    SessionLost,
    TransportFailure,
    UpstreamError,
)
from mcpfault.harness.client import StdioClient
from mcpfault.protocol import jsonrpc
from mcpfault.protocol.eras import LEGACY_VERSIONS
from mcpfault.proxy.http.server import HttpServer, Request, Response
from mcpfault.proxy.http.stdio import SESSION_HEADER

MAX_REQUEST_BYTES = 4 * 1024 * 1024
# What the MCP SDKs answer a request they gave up waiting for (mcp.shared.exceptions: REQUEST_TIMEOUT).
REQUEST_TIMEOUT = -32001
JSON = "application/json"


@dataclass(slots=True)
class TaskCalls:
    """One task's logical calls: the same request sent again within the task is a retry of it."""

    sent: dict[str, int] = field(default_factory=dict)  # canonical request -> attempts so far

    def attempt_number(self, method: str, params: Mapping[str, Any]) -> int:
        key = json.dumps([method, {k: v for k, v in params.items() if k != "_meta"}], sort_keys=True, default=str)
        self.sent[key] = self.sent.get(key, 0) + 1
        return self.sent[key]

    @property
    def calls(self) -> int:
        return len(self.sent)


class AgentGateway:
    """Serves one session's endpoint to the external agent's processes, one task at a time."""

    def __init__(self, client: StdioClient, handshake: Mapping[str, Any], *, deadline_s: float) -> None:
        self.client = client
        self.handshake = dict(handshake)  # the server's answer to the session's initialize
        self.deadline_s = deadline_s
        self.calls = TaskCalls()
        self.broken: UpstreamError | None = None  # the proxy or server went away: the session is over
        self.url = ""
        self._sessions: set[str] = set()
        self._server = HttpServer(self._handle, max_body_bytes=MAX_REQUEST_BYTES)

    async def start(self) -> str:
        port = await self._server.listen("127.0.0.1", 0)
        self.url = f"http://127.0.0.1:{port}/mcp"
        return self.url

    async def close(self) -> None:
        await self._server.close()

    def begin_task(self) -> None:
        self.calls = TaskCalls()

    async def _handle(self, request: Request) -> Response:
        if request.path != "/mcp":
            return Response(status=404, text=f"no MCP endpoint at {request.path}; it is {self.url}\n")
        if request.method == "DELETE":
            self._sessions.discard(request.headers.get(SESSION_HEADER, ""))
            return Response(status=204)
        if request.method != "POST":
            return Response(status=405, headers={"Allow": "POST, DELETE"}, text="POST JSON-RPC messages here\n")
        message = jsonrpc.parse(await request.read())
        if message.kind is not jsonrpc.MessageKind.REQUEST:
            # Notifications and answers (the harness's client answers for itself): accepted, not forwarded.
            if message.kind in (jsonrpc.MessageKind.NOTIFICATION, jsonrpc.MessageKind.RESPONSE):
                return Response(status=202)
            answer = jsonrpc.error_response(None, jsonrpc.PARSE_ERROR, f"not a JSON-RPC message: {message.why_opaque}")
            return _json(answer, status=400)
        assert message.body is not None and message.method is not None
        request_id = message.body.get("id")
        params = message.body.get("params")
        params = params if isinstance(params, dict) else {}
        if message.method == "initialize":
            session = uuid.uuid4().hex
            self._sessions.add(session)
            result = initialize_result(self.handshake, params.get("protocolVersion"))
            return _json({"jsonrpc": "2.0", "id": request_id, "result": result}, session=session)
        if message.method == "ping":
            return _json({"jsonrpc": "2.0", "id": request_id, "result": {}})
        return await self._forward(request, request_id, message.method, params)

    async def _forward(self, request: Request, request_id: Any, method: str, params: dict[str, Any]) -> Response:
        if self.broken is not None:
            return Response(status=502, text=f"the session is over: {self.broken}\n")
        number = self.calls.attempt_number(method, params)
        try:
            result = await self.client.request(method, params, deadline_s=self.deadline_s, attempt=number)
        except ProtocolError as exc:
            return _json(jsonrpc.error_response(request_id, exc.code, _message(exc)))
        except CallTimeout as exc:
            return _json(jsonrpc.error_response(request_id, REQUEST_TIMEOUT, str(exc)))
        except SessionLost as exc:
            await self._renew()
            return _json(jsonrpc.error_response(request_id, jsonrpc.INTERNAL_ERROR, str(exc)))
        except HttpStatusError as exc:
            headers = {"Retry-After": f"{exc.retry_after_s:g}"} if exc.retry_after_s is not None else {}
            return Response(status=exc.status, headers=headers, text=f"{exc}\n")
        except TransportFailure:
            request.abort()  # the answer was lost on the way: so it is for the agent
            return Response(status=502)  # never sent: the connection is gone
        except MalformedResponse as exc:
            return _json(jsonrpc.error_response(request_id, jsonrpc.INTERNAL_ERROR, str(exc)))
        except CallError as exc:
            return _json(jsonrpc.error_response(request_id, jsonrpc.INTERNAL_ERROR, str(exc)))
        except UpstreamError as exc:
            self.broken = exc
            return Response(status=502, text=f"the session is over: {exc}\n")
        return _json({"jsonrpc": "2.0", "id": request_id, "result": result})

    async def _renew(self) -> None:
        """A 404 for the harness's session: start a new one, so the agent's next request can succeed."""
        try:
            self.handshake = await self.client.reconnect()  # type: ignore[attr-defined]
        except (CallError, UpstreamError, AttributeError):
            pass


def _message(exc: ProtocolError) -> str:
    """The server's own message, without the ``JSON-RPC error N:`` the client puts in front."""
    text = str(exc)
    prefix = f"JSON-RPC error {exc.code}: "
    return text.removeprefix(prefix)


def _json(body: Mapping[str, Any], *, status: int = 200, session: str | None = None) -> Response:
    headers = {SESSION_HEADER: session} if session is not None else None
    return Response(status=status, headers=headers, body=jsonrpc.encode(dict(body)).rstrip(b"\n"), content_type=JSON)


def initialize_result(handshake: Mapping[str, Any], proposed: Any) -> Mapping[str, Any]:
    """The answer to the agent's ``initialize``: the session's own when it began with one; when it began
    with ``server/discover`` (2026-07-28), the same server and capabilities as an initialize result, at
    the version the agent proposed when it is one this era knows (else the newest)."""
    if "protocolVersion" in handshake or "supportedVersions" not in handshake:
        return handshake
    version = proposed if proposed in LEGACY_VERSIONS else max(LEGACY_VERSIONS)
    result = {"protocolVersion": version, "capabilities": handshake.get("capabilities") or {}}
    result["serverInfo"] = handshake.get("serverInfo") or {"name": "mcpfault-session", "version": "0"}
    if isinstance(handshake.get("instructions"), str):
        result["instructions"] = handshake["instructions"]
    return result
