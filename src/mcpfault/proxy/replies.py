"""The proxy's own answers for requests a server's death or restart left unanswered: one wording, one
``data.mcpfault`` shape, whichever transport and path found out (the core, the supervisor, HTTP)."""

from __future__ import annotations

from typing import Any

from mcpfault.protocol import jsonrpc
from mcpfault.telemetry.names import Received


def server_gone_reply(
    request_id: Any, *, exit_status: int | None, restarted_as: int | None, before: str, stopping: str | None = None
) -> tuple[bytes, Received]:
    """The error for a request the server never answered, and what the client received (the event's
    word): ``server_restarted`` naming the generation that serves now, or ``upstream_exited`` when none
    follows. ``before``: what the death came before ("answering tools/call", "this request").
    ``stopping``: why the proxy itself was ending (a signal to it, forwarded to the server), so the
    client is not told that the server died on its own."""
    received: Received
    if restarted_as is not None:
        received = "server_restarted"
        status = f"exit status {exit_status}; " if exit_status is not None else ""
        text = f"mcpfault: the MCP server restarted ({status}now generation {restarted_as}) before {before}"
        text += "; the request may be retried"
        data: dict[str, Any] = {"reason": received, "generation": restarted_as}
    else:
        received = "upstream_exited"
        data = {"reason": received}
        if stopping is None:
            text = f"mcpfault: the MCP server exited with code {exit_status} before {before}"
        else:
            text = (
                f"mcpfault: the proxy is stopping ({stopping}, passed on to the MCP server, which exited with "
                f"code {exit_status}) before {before}"
            )
            data["proxy_stopping"] = stopping
        text += "; no response will arrive"
    if exit_status is not None:
        data["exit_code"] = exit_status
    reply = jsonrpc.error_response(request_id, jsonrpc.UPSTREAM_UNAVAILABLE, text, {"mcpfault": data})
    return jsonrpc.encode(reply), received


def server_down_reply(request_id: Any, hold_s: float) -> bytes:
    """The error for a request held while the server restarted, when it was not back within ``hold_s``
    (the client received a ``timeout``: the request never reached a server)."""
    text = f"mcpfault: the MCP server is down (restarting) and was not back within {hold_s:g}s; retry later"
    data = {"mcpfault": {"reason": "server_down", "hold_s": hold_s}}
    return jsonrpc.encode(jsonrpc.error_response(request_id, jsonrpc.UPSTREAM_UNAVAILABLE, text, data))
