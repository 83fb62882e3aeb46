"""error: the proxy answers in the server's place; the server never sees the request."""

from __future__ import annotations

from dataclasses import dataclass
from random import Random
from typing import ClassVar, Literal

from mcpfault.faults.base import READS, SERVER_REQUESTS, TOOLS_CALL, Call, Effect, FaultBase, Injection, PlanContext
from mcpfault.protocol import jsonrpc


@dataclass(frozen=True, slots=True)
class Error(FaultBase):
    # The client gets an error in place of the answer: its attempt fails, and that is the effect.
    effect: ClassVar[Effect] = "failure"
    type_name: ClassVar[str] = "error"
    MODES: ClassVar[tuple[str, ...]] = ("protocol", "tool")
    event_name: ClassVar[str] = "mcpfault.error"
    targets: ClassVar[frozenset[str]] = TOOLS_CALL | READS | SERVER_REQUESTS

    # protocol: a JSON-RPC error response; tool: a tools/call result with isError true.
    mode: Literal["protocol", "tool"] = "protocol"
    code: int = jsonrpc.INTERNAL_ERROR
    message: str = "Internal error"

    def methods_allowed(self) -> frozenset[str]:
        # isError is a tools/call result's field: no other request has a tool error.
        return TOOLS_CALL if self.mode == "tool" else self.targets

    def plan(self, call: Call, rng: Random, ctx: PlanContext) -> Injection:
        if self.mode == "tool":
            text = self.message if self.message != "Internal error" else "Tool execution failed"
            return Injection("tool", reply=jsonrpc.tool_error_result(call.request_id, text, modern=call.modern))
        return Injection("protocol", reply=jsonrpc.error_response(call.request_id, self.code, self.message))
