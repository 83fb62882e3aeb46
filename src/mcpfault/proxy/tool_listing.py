"""The proxy's own ``tools/list``: what annotation-aware rules match on, whatever the client does.

A rule with ``read_only`` (or a fault that reads a tool's schema) needs the server's description of
each tool. A client that never lists tools would otherwise escape such rules, so a naive agent and a
resilient one would meet different faults. The proxy asks for itself, after the handshake and again
on ``notifications/tools/list_changed``, on an id space of its own (``mcpfault-tools-N``) whose
answers it consumes and never forwards. Every page is read (``nextCursor``), and only the complete
listing replaces what the engine knew.

While a listing is on its way, the client's requests that a rule may act on wait in the core (in
order), so that whether a call matched does not depend on which answer the server sent first: the
bench's sequence of faults stays the same on every run. An error answer, a server that exits or
restarts, a page limit, or no complete listing within ``WAIT_S`` (a server that never answers it) ends
the wait; the requests then go on with what the engine knew.

Pure state, no I/O: ``ProxyCore`` sends what ``request`` builds and feeds back what the server answers.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from mcpfault.protocol import jsonrpc

ID_PREFIX = "mcpfault-tools-"
MAX_PAGES = 100  # a server whose cursor never ends is not followed forever
WAIT_S = 5.0  # how long client requests wait for a listing before they go on without it


def is_own_id(request_id: object) -> bool:
    """Whether a response's id is one of the proxy's own listing requests."""
    return isinstance(request_id, str) and request_id.startswith(ID_PREFIX)


@dataclass
class ToolListing:
    """One listing at a time: its pages so far, and the client lines waiting for it."""

    counter: int = 0
    pending_id: str | None = None
    reason: str = ""  # why it was asked: handshake, list_changed, rules
    pages: int = 0
    tools: list[Mapping[str, Any]] = field(default_factory=list)
    waiting: list[bytes] = field(default_factory=list)
    listed: bool = False  # a listing has completed (or failed) at least once
    meta: Mapping[str, Any] | None = None  # the 2026-07-28 era's per-request _meta, copied from the client
    started: float = 0.0  # when the listing on its way was asked for (the core's clock)

    @property
    def in_progress(self) -> bool:
        return self.pending_id is not None

    def start(self, reason: str, now: float) -> bytes:
        """The first page's request; a listing already on its way is replaced (its answers are dropped)."""
        self.reason, self.pages, self.tools, self.started = reason, 0, [], now
        return self.request(None)

    def request(self, cursor: str | None) -> bytes:
        self.counter += 1
        self.pending_id = f"{ID_PREFIX}{self.counter}"
        params: dict[str, Any] = {}
        if cursor is not None:
            params["cursor"] = cursor
        if self.meta is not None:
            params["_meta"] = dict(self.meta)
        body: dict[str, Any] = {"jsonrpc": "2.0", "id": self.pending_id, "method": "tools/list"}
        if params:
            body["params"] = params
        return jsonrpc.encode(body)

    def answered(self, body: Mapping[str, Any]) -> tuple[bytes | None, str | None]:
        """One answer to an own request: (the next page's request, or None) and, when the listing
        ended, how (``complete``, ``error``, ``page_limit``; None while pages remain or for an answer
        to a replaced listing)."""
        if body.get("id") != self.pending_id:
            return None, None  # a replaced listing's late answer
        result = body.get("result")
        if not isinstance(result, Mapping) or not isinstance(result.get("tools"), list):
            return None, self._end("error")
        self.pages += 1
        self.tools.extend(t for t in result["tools"] if isinstance(t, Mapping))
        cursor = result.get("nextCursor")
        if isinstance(cursor, str) and cursor:
            if self.pages >= MAX_PAGES:
                return None, self._end("page_limit")
            return self.request(cursor), None
        return None, self._end("complete")

    def _end(self, how: str) -> str:
        self.pending_id = None
        self.listed = True
        return how

    def abandon(self) -> list[bytes]:
        """The server is gone (or restarting): stop waiting, and hand back the lines that waited."""
        self.pending_id = None
        return self.release()

    def release(self) -> list[bytes]:
        waiting, self.waiting = self.waiting, []
        return waiting
