"""Every exception mcpfault raises on purpose.

MCPFaultError
├── ProfileError     a profile failed validation; carries every Problem found
├── UsageError       a command-line value is wrong (what, where, what to do)
└── UpstreamError    the MCP server could not be started or reached
"""

from __future__ import annotations

from dataclasses import dataclass


class MCPFaultError(Exception):
    """Base of every error mcpfault raises on purpose."""


@dataclass(frozen=True, slots=True)
class Problem:
    """One thing wrong with a profile: where (file, rule, field), what, and what is allowed."""

    file: str
    rule: int | None  # index into [[faults]], None for top-level keys
    field: str
    message: str
    rule_name: str | None = None

    def where(self) -> str:
        if self.rule is None:
            return f"{self.file}: {self.field}"
        named = f" ({self.rule_name!r})" if self.rule_name else ""
        return f"{self.file}: faults[{self.rule}]{named}.{self.field}"

    def __str__(self) -> str:
        return f"{self.where()}: {self.message}"


class ProfileError(MCPFaultError):
    """A profile failed validation; ``problems`` holds every Problem found, not just the first."""

    def __init__(self, problems: list[Problem]) -> None:
        self.problems = problems
        plural = "s" if len(problems) != 1 else ""
        lines = "\n".join(f"  {p}" for p in problems)
        super().__init__(f"{len(problems)} problem{plural} in profile:\n{lines}")


class UsageError(MCPFaultError):
    """A command-line value is wrong; the message says what, where and what to do."""


class UpstreamError(MCPFaultError):
    """The MCP server could not be started or reached."""


class CallError(MCPFaultError):
    """A request failed; ``failure`` names the class for records and reports."""

    failure = "call_error"


class CallTimeout(CallError):
    failure = "timeout"


class ProtocolError(CallError):
    failure = "protocol_error"

    def __init__(self, code: int, message: str) -> None:
        self.code = code
        super().__init__(f"JSON-RPC error {code}: {message}")


class ToolError(CallError):
    failure = "tool_error"


class MalformedResponse(CallError):
    failure = "malformed"

    def __init__(self, kind: str, detail: str) -> None:
        self.kind = kind  # not_json, wrong_id, missing_result, wrong_type, ...
        super().__init__(f"malformed response ({kind}): {detail}")


class ContractChanged(CallError):
    failure = "contract_changed"


class StaleResult(CallError):
    failure = "stale"
