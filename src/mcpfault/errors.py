"""The exception tree: every exception mcpfault raises on purpose derives from ``MCPFaultError``.

The base classes live here; the others live beside the code that raises them, each also a
``ValueError``, ``LookupError``, ``RuntimeError`` or ``ConnectionError`` where callers expect one.
``tests/test_errors.py`` fails when an exception class is defined anywhere in the package and not
drawn here, or does not derive from ``MCPFaultError`` (only private control-flow signals, named
``_Like`` this, are exempt).

MCPFaultError
├── ProblemsError           a document failed validation; carries every Problem found
│   ├── ProfileError            a fault profile
│   └── ExperimentError         an experiment file (experiments.plan)
├── UsageError              a command-line value is wrong (what, where, what to do)
│   ├── AddressError            not HOST:PORT (loopback)
│   ├── UrlError                not an http(s) URL with a host (loopback)
│   └── BeyondLoopbackError     listening beyond loopback without a token (loopback)
├── UpstreamError           the MCP server could not be started or reached
├── CallError               one request of an agent failed; ``failure`` names its class in records
│   ├── CallTimeout, ProtocolError, ToolError, MalformedResponse, ContractChanged, StaleResult
│   ├── TransportFailure        below JSON-RPC, over HTTP
│   │   ├── HttpStatusError         └── SessionLost
│   │   ├── StreamCut
│   │   └── ConnectionLost
│   ├── TaskDeadlineExceeded    (harness.agents.policies)
│   ├── CircuitOpen, BudgetExhausted   (harness.agents.resilient)
│   ├── Inconsistent            two sources disagree (harness.agents.verify)
│   ├── AgentReportedFailure, AgentNoAnswer, AgentCrashed, AgentTimeout, AnswerInvalid
│   │                           your agent's command (harness.agents.external)
│   ├── ModelGaveUp, NoAnswer, TurnsExhausted   the LLM agent (harness.agents.llm.agent)
│   └── ModelError              the model API (harness.agents.llm.backend)
│       └── ModelRetryable, ModelUnavailable, ModelMalformed, ReplayMissing
├── ControlError            a control API request refused (control.controller)
│   └── NotFound, Conflict, NoServerControl, Invalid
├── ApiError, Unreachable, BadUrl   a control API client's failures (control.client)
├── CannotRestart           no server to restart (control.server)
├── ProxyError              api.Proxy could not start its proxy (app.launch)
├── ReadyFileError          a readiness record that is not one, or never came (app.ready)
├── Failed                  an experiment step failed (experiments.runner)
├── Miss                    a replayed request the cassette has no answer for (cassette.matching)
├── Unsatisfiable           no argument satisfies a tool's inputSchema (audit.arguments)
├── OtelConfigError, ExportError   OpenTelemetry settings, OTLP export (telemetry.otel_env, .export)
├── SidecarFailed, ControlLineError   the side-effect probe (probe.monitor, probe.protocol)
├── ServerDown, UpstreamBroke, BodyTooLarge   transport signals (proxy.supervised, .upstream, .http_server)
├── WireError               a Chat Completions body we cannot map (harness.agents.llm.openai_wire)
└── MockWorldError, JournalError, RequestError, ResourceNotFound   the mock server (mock.*)
    └── UnknownIdError, InvalidArgumentError
"""

from __future__ import annotations

from collections.abc import Sequence
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


class ProblemsError(MCPFaultError):
    """Every problem found in one document, each printable on its own line."""

    kind = "document"

    def __init__(self, problems: Sequence[object]) -> None:
        self.problems: Sequence[object] = problems
        plural = "s" if len(problems) != 1 else ""
        lines = "\n".join(f"  {p}" for p in problems)
        super().__init__(f"{len(problems)} problem{plural} in {self.kind}:\n{lines}")


class ProfileError(ProblemsError):
    """A profile failed validation; ``problems`` holds every Problem found, not just the first."""

    kind = "profile"

    def __init__(self, problems: list[Problem]) -> None:
        super().__init__(problems)
        self.problems: list[Problem] = problems


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


class TransportFailure(CallError):
    """The HTTP exchange failed below JSON-RPC: no answer came, or an HTTP error came instead.

    ``transient``: another try may succeed (what a retry wrapper retries); every subclass here is.
    """

    failure = "transport"
    transient = True


class HttpStatusError(TransportFailure):
    """An HTTP error status instead of an answer (a gateway's 503, a rate limiter's 429)."""

    failure = "http_status"

    def __init__(self, status: int, message: str, retry_after_s: float | None = None) -> None:
        self.status = status
        self.retry_after_s = retry_after_s  # the Retry-After header, in seconds, when there was one
        super().__init__(message)


class SessionLost(HttpStatusError):
    """404 for the client's session id: the server no longer knows the session (a 2025-11-25 client
    MUST start a new one with ``initialize``)."""

    failure = "session_lost"


class StreamCut(TransportFailure):
    """The answer's stream ended (or the connection closed) before the answer: it is lost."""

    failure = "stream_cut"


class ConnectionLost(TransportFailure):
    """The connection closed before any HTTP response (a reset)."""

    failure = "connection_reset"
