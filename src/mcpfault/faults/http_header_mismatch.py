"""header_mismatch: the request reaches the server with an Mcp-Method, Mcp-Name or MCP-Protocol-Version
header that disagrees with its body (an intermediary that rewrote one and not the other).

A 2026-07-28 server must refuse it with -32020; a 2025-11-25 server reads only the body and answers as
usual, so the fault tests the server. It acts on requests forwarded to an HTTP server (not on a stdio
server behind the HTTP proxy, which sees no headers).
"""

from __future__ import annotations

from dataclasses import dataclass
from random import Random
from typing import ClassVar, Literal

from mcpfault.faults.base import HTTP, REQUESTS, Call, FaultBase, HttpBehaviour, Injection, PlanContext
from mcpfault.protocol import headers as mirrored

Header = Literal["method", "name", "protocol_version"]
_NAMES: dict[str, str] = {
    "method": mirrored.METHOD_HEADER,
    "name": mirrored.NAME_HEADER,
    "protocol_version": mirrored.PROTOCOL_VERSION_HEADER,
}


@dataclass(frozen=True, slots=True)
class _Mismatched(HttpBehaviour):
    header: str
    value: str

    def request_headers(self, headers: list[tuple[str, str]]) -> list[tuple[str, str]]:
        kept = [(k, v) for k, v in headers if k.lower() != self.header.lower()]
        return [*kept, (self.header, self.value)]


@dataclass(frozen=True, slots=True)
class HeaderMismatch(FaultBase):
    type_name: ClassVar[str] = "header_mismatch"
    MODES: ClassVar[tuple[str, ...]] = ("method", "name", "protocol_version")
    event_name: ClassVar[str] = "mcpfault.header_mismatch"
    targets: ClassVar[frozenset[str]] = REQUESTS
    transports: ClassVar[frozenset[str]] = frozenset({HTTP})

    # Which header disagrees with the body: Mcp-Method (another method), Mcp-Name (another name), or
    # MCP-Protocol-Version (the other era's version).
    header: Header = "method"

    def plan(self, call: Call, rng: Random, ctx: PlanContext) -> Injection:
        if self.header == "method":
            value = "tools/list" if call.method != "tools/list" else "prompts/list"
        elif self.header == "name":
            value = mirrored.encode_value(f"{call.target or 'nothing'}-not-this-one")
        else:
            value = "2025-11-25" if call.modern else "2026-07-28"
        return Injection(self.header, http=_Mismatched(_NAMES[self.header], value))
