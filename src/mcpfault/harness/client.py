"""The harness's own MCP client over stdio: one exception per failure mode, a deadline per call.

The official SDK client is built to hide failures (it retries, validates, raises generic errors); a
harness has to see each one as it is. Calls are expected one at a time per client, so an answer that
cannot be matched to its request (not JSON, a wrong id) is pinned on the one request waiting.

Given a tracer, every request is a CLIENT span named and attributed per the MCP conventions, child
of ``span_parent`` (the task's span), with its ``traceparent`` in ``params._meta`` so the proxy's and
the server's spans nest under it. Without one the client builds no span and adds nothing to a request.
"""

from __future__ import annotations

import itertools
import json
import re
import subprocess
import time
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import IO, TYPE_CHECKING, Any, Literal, Self

import anyio
from anyio.abc import Process

from mcpfault.errors import (
    CallError,
    CallTimeout,
    MalformedResponse,
    ProtocolError,
    ToolError,
    UpstreamError,
)
from mcpfault.harness.forkserver import ForkedProcess, ForkServer, forkable
from mcpfault.protocol import jsonrpc
from mcpfault.protocol.eras import LEGACY_VERSIONS, META_PROTOCOL_VERSION, MODERN_VERSIONS
from mcpfault.protocol.jsonrpc import MessageKind
from mcpfault.proxy.pipes import LineSplitter
from mcpfault.telemetry import names as span_names

if TYPE_CHECKING:
    from opentelemetry.context import Context
    from opentelemetry.trace import Span, Tracer

Era = Literal["legacy", "modern"]
CLIENT_INFO = {"name": "mcpfault-harness", "version": "0.1.0"}


@dataclass(slots=True)
class Attempt:
    """One request as the client saw it."""

    request_id: int
    method: str
    tool: str | None
    started: float
    task: int | None = None  # the task it was sent for, when a harness runs tasks
    number: int = 1  # which try of the agent's logical call this is
    backoff_s: float = 0.0  # what the agent slept before it
    duration_s: float = 0.0
    outcome: str = "pending"  # ok, or a CallError.failure
    detail: str = ""
    error_code: int | None = None  # the JSON-RPC error code, for a protocol_error
    as_of: int | None = None  # the answer's as_of (the mock's revision stamp), when it has one

    def as_record(self) -> dict[str, Any]:
        return {
            "request_id": self.request_id,
            "task": self.task,
            "method": self.method,
            "tool": self.tool,
            "attempt": self.number,
            "backoff_s": round(self.backoff_s, 6),
            "duration_s": round(self.duration_s, 6),
            "outcome": self.outcome,
            "detail": self.detail,
        }


@dataclass(slots=True)
class _Waiter:
    attempt: Attempt
    done: anyio.Event = field(default_factory=anyio.Event)
    body: dict[str, Any] | None = None
    error: CallError | None = None


HANDSHAKE = frozenset({"initialize", "notifications/initialized", "server/discover"})
# What servers say to a request on a session they do not know (the mock, the SDK, a proxy's 404).
_UNKNOWN_SESSION = re.compile(r"before initiali[sz]|not initiali[sz]ed|session not found|unknown session", re.I)


def _session_unknown(message: str) -> bool:
    return _UNKNOWN_SESSION.search(message) is not None


class StdioClient:
    network_transport = span_names.NETWORK_TRANSPORT_PIPE  # on every attempt span

    def __init__(
        self,
        command: Sequence[str],
        *,
        deadline_s: float = 0.5,
        era: Era = "legacy",
        stderr: IO[bytes] | int | None = None,
        tracer: Tracer | None = None,
        launcher: ForkServer | None = None,
    ) -> None:
        self.command = list(command)
        self._launcher = launcher  # starts a `python -m mcpfault ...` command by forking a warm interpreter
        self.deadline_s = deadline_s
        self.era = era
        self.attempts: list[Attempt] = []
        self.tools_changed = False
        self.current_task: int | None = None
        self.span_parent: Context | None = None  # where attempt spans go (the task's span); None: a new trace
        self._spans = _AttemptSpans(tracer, self.network_transport) if tracer is not None else None
        self.late_replies = 0
        # Ids given up on (deadline passed): their answers may still come, and must not be taken for
        # a stray reply to whatever is waiting now. Bounded like everything a session keeps.
        self._abandoned: deque[int] = deque(maxlen=4096)
        self._stderr = stderr
        self._ids = itertools.count(1)
        self._waiting: dict[int, _Waiter] = {}
        self._process: Process | ForkedProcess | None = None
        self._tg: anyio.abc.TaskGroup | None = None
        self._closed = anyio.Event()
        self.exit_code: int | None = None

    async def __aenter__(self) -> Self:
        try:
            if self._launcher is not None and forkable(self.command):
                self._process = await self._launcher.spawn(self.command, stderr=self._stderr)
            else:
                self._process = await anyio.open_process(
                    self.command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._stderr
                )
        except OSError as exc:
            raise UpstreamError(f"cannot start {self.command[0]!r}: {exc}") from None
        self._tg = anyio.create_task_group()
        await self._tg.__aenter__()
        self._tg.start_soon(self._read)
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        assert self._process is not None and self._tg is not None
        with anyio.CancelScope(shield=True):
            if self._process.stdin is not None:
                try:
                    await self._process.stdin.aclose()
                except (anyio.BrokenResourceError, OSError):
                    pass
            with anyio.move_on_after(10):
                self.exit_code = await self._process.wait()
            if self.exit_code is None:
                self._process.kill()
                self.exit_code = await self._process.wait()
        self._tg.cancel_scope.cancel()
        await self._tg.__aexit__(None, None, None)
        with anyio.CancelScope(shield=True):
            await self._process.aclose()  # the pipes' ends; the process has exited by now

    # -- the protocol -----------------------------------------------------------------------------

    async def connect(self, deadline_s: float = 15.0) -> dict[str, Any]:
        """The handshake of the client's era; returns the server's answer."""
        if self.era == "legacy":
            params = {"protocolVersion": LEGACY_VERSIONS[-1], "capabilities": {}, "clientInfo": CLIENT_INFO}
            result = await self.request("initialize", params, deadline_s=deadline_s)
            await self.notify("notifications/initialized")
            return result
        return await self.request("server/discover", {}, deadline_s=deadline_s)

    async def list_tools(self) -> list[dict[str, Any]]:
        result = await self.request("tools/list", {})
        tools = result.get("tools")
        if not isinstance(tools, list):
            raise MalformedResponse("wrong_type", "tools/list result has no list of tools")
        self.tools_changed = False
        return tools

    async def call_tool(
        self,
        name: str,
        arguments: Mapping[str, Any],
        *,
        deadline_s: float | None = None,
        attempt: int = 1,
        backoff_s: float = 0.0,
    ) -> Any:
        """The tool's result (its structuredContent when present); raises a CallError subclass.

        ``attempt`` and ``backoff_s``: which try of the caller's logical call this is and what it slept
        before it, recorded with the attempt (and on its span).
        """
        params = {"name": name, "arguments": dict(arguments)}
        result = await self.request("tools/call", params, deadline_s=deadline_s, attempt=attempt, backoff_s=backoff_s)
        if result.get("isError") is True:
            texts = [c.get("text", "") for c in result.get("content") or [] if isinstance(c, dict)]
            raise ToolError(" ".join(texts) or "tool reported an error")
        return result.get("structuredContent", result)

    async def read_resource(
        self, uri: str, *, deadline_s: float | None = None, attempt: int = 1, backoff_s: float = 0.0
    ) -> Any:
        """A resource's JSON content (its first text content, parsed); raises a CallError subclass."""
        result = await self.request(
            "resources/read", {"uri": uri}, deadline_s=deadline_s, attempt=attempt, backoff_s=backoff_s
        )
        return resource_content(result)

    async def get_prompt(
        self,
        name: str,
        arguments: Mapping[str, str],
        *,
        deadline_s: float | None = None,
        attempt: int = 1,
        backoff_s: float = 0.0,
    ) -> str:
        """The text of a prompt's messages, joined; raises a CallError subclass."""
        params = {"name": name, "arguments": dict(arguments)}
        result = await self.request("prompts/get", params, deadline_s=deadline_s, attempt=attempt, backoff_s=backoff_s)
        messages = result.get("messages")
        if not isinstance(messages, list):
            raise MalformedResponse("wrong_type", "prompts/get result has no list of messages")
        texts = [
            m["content"].get("text") for m in messages if isinstance(m, dict) and isinstance(m.get("content"), dict)
        ]
        return "\n".join(t for t in texts if isinstance(t, str))

    async def request(
        self,
        method: str,
        params: Mapping[str, Any],
        *,
        deadline_s: float | None = None,
        attempt: int = 1,
        backoff_s: float = 0.0,
    ) -> dict[str, Any]:
        request_id = next(self._ids)
        tool = params.get("name") if method == "tools/call" else None
        record = Attempt(
            request_id,
            method,
            tool if isinstance(tool, str) else None,
            time.monotonic(),
            self.current_task,
            number=attempt,
            backoff_s=backoff_s,
        )
        self.attempts.append(record)
        if self._spans is None:
            return await self._exchange(record, params, deadline_s)
        span = self._spans.start(record, self.span_parent)
        try:
            return await self._exchange(record, self._spans.carrying(span, params), deadline_s)
        finally:
            self._spans.end(span, record)

    async def _exchange(self, attempt: Attempt, params: Mapping[str, Any], deadline_s: float | None) -> dict[str, Any]:
        request_id, method = attempt.request_id, attempt.method
        waiter = _Waiter(attempt)
        self._waiting[request_id] = waiter
        body = {"jsonrpc": "2.0", "id": request_id, "method": method, "params": self._with_meta(params)}
        try:
            await self._send(body)
            with anyio.fail_after(self.deadline_s if deadline_s is None else deadline_s):
                await waiter.done.wait()
        except TimeoutError:
            self._finish(attempt, "timeout", "no answer within the deadline")
            self._abandoned.append(request_id)
            await self._cancel(request_id)
            raise CallTimeout(f"{method} {attempt.tool or ''}: no answer in {deadline_s or self.deadline_s}s") from None
        except CallError as exc:
            self._finish(attempt, exc.failure, str(exc))
            raise
        finally:
            self._waiting.pop(request_id, None)
        if waiter.error is not None:
            self._finish(attempt, waiter.error.failure, str(waiter.error))
            raise waiter.error
        assert waiter.body is not None
        error = waiter.body.get("error")
        if isinstance(error, dict):
            code = error.get("code")
            failure = ProtocolError(code if isinstance(code, int) else 0, str(error.get("message", "")))
            attempt.error_code = failure.code
            self._finish(attempt, failure.failure, str(failure))
            said = f"{error.get('message', '')} {error.get('data', '')}"  # the detail is often in data
            if method not in HANDSHAKE and self.era == "legacy" and _session_unknown(said):
                # A restarted server forgot the session: start a new one, as a real client does; the
                # caller still gets this error and decides whether to retry.
                await self.connect()
            raise failure
        result = waiter.body.get("result")
        if not isinstance(result, dict):
            malformed = MalformedResponse("wrong_type", f"result is a JSON {type(result).__name__}")
            self._finish(attempt, malformed.failure, str(malformed))
            raise malformed
        if method == "tools/call" and result.get("isError") is True:
            self._finish(attempt, ToolError.failure, "isError: true")
        else:
            self._finish(attempt, "ok", "")
            content = result.get("structuredContent")
            if method == "resources/read":
                try:
                    content = resource_content(result)
                except MalformedResponse:
                    content = None
            as_of = content.get("as_of") if isinstance(content, dict) else None
            attempt.as_of = as_of if isinstance(as_of, int) and not isinstance(as_of, bool) else None
        return result

    async def notify(self, method: str, params: Mapping[str, Any] | None = None) -> None:
        body: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            body["params"] = dict(params)
        await self._send(body)

    # -- plumbing ---------------------------------------------------------------------------------

    def _with_meta(self, params: Mapping[str, Any]) -> dict[str, Any]:
        out = dict(params)
        if self.era == "modern":
            meta = dict(out.get("_meta") or {})
            meta[META_PROTOCOL_VERSION] = MODERN_VERSIONS[-1]
            meta["io.modelcontextprotocol/clientInfo"] = CLIENT_INFO
            meta["io.modelcontextprotocol/clientCapabilities"] = {}
            out["_meta"] = meta
        return out

    @staticmethod
    def _finish(attempt: Attempt, outcome: str, detail: str) -> None:
        if attempt.outcome == "pending":
            attempt.outcome, attempt.detail = outcome, detail
            attempt.duration_s = time.monotonic() - attempt.started

    async def _send(self, body: Mapping[str, Any]) -> None:
        assert self._process is not None and self._process.stdin is not None
        try:
            await self._process.stdin.send(jsonrpc.encode(dict(body)))
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError) as exc:
            raise UpstreamError(f"the MCP server's stdin is closed ({exc}); it has exited") from None

    async def _cancel(self, request_id: int) -> None:
        try:
            await self.notify("notifications/cancelled", {"requestId": request_id, "reason": "deadline exceeded"})
        except UpstreamError:
            pass

    async def _read(self) -> None:
        assert self._process is not None and self._process.stdout is not None
        splitter = LineSplitter()
        try:
            async for chunk in self._process.stdout:
                for line in splitter.feed(chunk):
                    await self._on_line(line)
        except (anyio.BrokenResourceError, OSError):
            pass
        finally:
            for waiter in list(self._waiting.values()):
                waiter.error = CallError("the MCP server closed its stdout (it exited)")
                waiter.done.set()
            self._closed.set()

    async def _on_line(self, line: bytes) -> None:
        message = jsonrpc.parse(line)
        if message.kind is MessageKind.RESPONSE:
            assert message.body is not None
            request_id = message.body.get("id")
            waiter = self._waiting.get(request_id) if isinstance(request_id, int) else None
            if waiter is not None:
                waiter.body = message.body
                waiter.done.set()
            elif request_id in self._abandoned:
                self.late_replies += 1  # the answer to a request whose deadline passed: too late to matter
            else:
                self._blame_single("wrong_id", f"an answer for id {request_id!r}, which nobody asked for")
        elif message.kind is MessageKind.NOTIFICATION:
            if message.method == "notifications/tools/list_changed":
                self.tools_changed = True
        elif message.kind is MessageKind.REQUEST:
            assert message.body is not None
            answer = jsonrpc.error_response(message.body["id"], jsonrpc.METHOD_NOT_FOUND, "not supported here")
            await self._send(answer)
        else:
            kind = "missing_result" if message.why_opaque.startswith("a JSON object") else "not_json"
            self._blame_single(kind, message.why_opaque)

    def _blame_single(self, kind: str, detail: str) -> None:
        if len(self._waiting) == 1:
            waiter = next(iter(self._waiting.values()))
            waiter.error = MalformedResponse(kind, detail)
            waiter.done.set()


def resource_content(result: Mapping[str, Any]) -> Any:
    """The first text content of a resources/read result, parsed as JSON; MalformedResponse if there is none."""
    contents = result.get("contents")
    first = contents[0] if isinstance(contents, list) and contents else None
    text = first.get("text") if isinstance(first, dict) else None
    if not isinstance(text, str):
        raise MalformedResponse("wrong_type", "resources/read result has no text contents")
    try:
        return json.loads(text)
    except ValueError as exc:
        raise MalformedResponse("not_json", f"resource contents are not JSON: {exc}") from None


class _AttemptSpans:
    """The CLIENT span of each attempt; built only for a traced client, so an untraced one imports no OpenTelemetry."""

    def __init__(self, tracer: Tracer, network_transport: str = span_names.NETWORK_TRANSPORT_PIPE) -> None:
        from opentelemetry.trace import SpanKind, Status, StatusCode, set_span_in_context

        from mcpfault.telemetry import names
        from mcpfault.telemetry.tracing import inject_context, span_name

        self._tracer = tracer
        self._network_transport = network_transport
        self._kind = SpanKind.CLIENT
        self._status, self._error = Status, StatusCode.ERROR
        self._in_context = set_span_in_context
        self._inject, self._span_name = inject_context, span_name
        self._names = names

    def start(self, attempt: Attempt, parent: Context | None) -> Span:
        names, ours = self._names, span_names
        attributes: dict[str, Any] = {
            names.MCP_METHOD_NAME: attempt.method,
            names.JSONRPC_REQUEST_ID: str(attempt.request_id),
            names.NETWORK_TRANSPORT: self._network_transport,
            ours.ATTEMPT: attempt.number,
            ours.BACKOFF_S: attempt.backoff_s,
        }
        if attempt.tool is not None:
            attributes[names.GEN_AI_TOOL_NAME] = attempt.tool
            attributes[names.GEN_AI_OPERATION_NAME] = names.GEN_AI_OPERATION_EXECUTE_TOOL
        name = self._span_name(attempt.method, attempt.tool)
        return self._tracer.start_span(name, context=parent, kind=self._kind, attributes=attributes)

    def carrying(self, span: Span, params: Mapping[str, Any]) -> dict[str, Any]:
        """``params`` with the span's trace context in ``_meta``, the caller's mapping left as it was."""
        out = dict(params)
        meta = out.get("_meta")
        out["_meta"] = self._inject(dict(meta) if isinstance(meta, Mapping) else {}, self._in_context(span))
        return out

    def end(self, span: Span, attempt: Attempt) -> None:
        names = self._names
        # Still pending: cancelled from outside, the session being torn down mid-request.
        outcome = "cancelled" if attempt.outcome == "pending" else attempt.outcome
        if outcome != "ok":
            span.set_attribute(span_names.FAILURE, outcome)
            if attempt.error_code is not None:
                error_type = str(attempt.error_code)
                span.set_attribute(names.RPC_RESPONSE_STATUS_CODE, error_type)
            elif outcome == ToolError.failure:
                error_type = names.ERROR_TYPE_TOOL_ERROR
            else:  # no answer, or none that could be read: the conventions' catch-all, as the proxy uses it
                error_type = names.OTHER
            span.set_attribute(names.ERROR_TYPE, error_type)
            span.set_status(self._status(self._error, attempt.detail or outcome))
        elif attempt.as_of is not None:  # what tells a stale answer that differs from one that does not
            span.set_attribute(span_names.RESULT_AS_OF, attempt.as_of)
        span.end()
