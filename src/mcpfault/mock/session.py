"""One stdio connection of the mock server: its protocol era, its handshake, and the answer to each request.

Built on `mcpfault.protocol` rather than the MCP SDK so that a start costs tens of milliseconds, not
the ~0.6 s of CPU the SDK's imports take (benchmarks start many of these). On the wire it answers as
the SDK's `MCPServer` did, era rules included:

- The client's first request fixes the connection's era, once. A request whose `params._meta` holds
  `io.modelcontextprotocol/protocolVersion` (other than `initialize`) opens a 2026-07-28 connection;
  anything else opens a 2025-11-25 one.
- 2025-11-25: `initialize` negotiates the version (the client's if supported, else the latest); other
  requests are refused with -32602 until it has happened, except `ping`. Requests carrying the 2026
  envelope are refused with -32600.
- 2026-07-28: every request must carry the envelope (-32602 if not; -32022 naming the supported
  versions if its version is not served); `server/discover` describes the server; `ping` is gone
  (-32601); `initialize` is refused with -32022. Every result carries `resultType: "complete"` and the
  server's info in `_meta`; list results carry `ttlMs` and `cacheScope`.
- `tools/call`: the tool's answer as `structuredContent` and as indented JSON text. An unknown tool or
  arguments that do not fit the tool's `inputSchema` are JSON-RPC errors (-32602); a request the world
  refuses (unknown id, empty summary) is a tool result with `isError: true`.
- Resources and the prompt (`mcpfault.mock.resources`): device configurations and incidents, read,
  listed and subscribed to; `notifications/resources/updated` and `.../list_changed` follow the answer
  to the write that caused them. "Resource not found" is -32602 with the URI as `data`.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final

from mcpfault.errors import MCPFaultError
from mcpfault.mock import jsontext, resources
from mcpfault.mock.journal import Journal, JournalError
from mcpfault.mock.schema import argument_problems
from mcpfault.mock.tools import TOOLS
from mcpfault.mock.tracing import RequestSpans
from mcpfault.mock.world import MockWorldError, World
from mcpfault.protocol.eras import LEGACY_VERSIONS, META_PROTOCOL_VERSION, MODERN_VERSIONS, Era
from mcpfault.protocol.jsonrpc import (
    INTERNAL_ERROR,
    INVALID_PARAMS,
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    MessageKind,
    encode,
    error_response,
    parse,
)

if TYPE_CHECKING:
    from mcpfault.telemetry.fastspans import SpanRecorder

SERVER_NAME: Final = "mcpfault-mock"
SERVER_VERSION: Final = "0.1.0"
SERVER_INFO: Final = {"name": SERVER_NAME, "version": SERVER_VERSION}
INSTRUCTIONS: Final = (
    "A simulated network-operations inventory. Start with list_sites, then list_devices(site_id), then "
    "get_device_status / get_interface_metrics(device_id). set_maintenance and open_incident change state; "
    "open_incident is not idempotent, so pass an idempotency_key if you may retry it. Every answer has as_of, "
    "the state revision it reflects."
)
# The tools and the prompt never change; the resource list does (a new incident), and configurations
# can be subscribed to (mock/resources.py).
CAPABILITIES: Final = {
    "tools": {"listChanged": False},
    "resources": {"subscribe": True, "listChanged": True},
    "prompts": {"listChanged": False},
}

UNSUPPORTED_PROTOCOL_VERSION: Final = -32022  # reserved by the 2026-07-28 revision
META_CLIENT_CAPABILITIES: Final = "io.modelcontextprotocol/clientCapabilities"
META_SERVER_INFO: Final = "io.modelcontextprotocol/serverInfo"
LATEST_LEGACY_VERSION: Final = max(LEGACY_VERSIONS)
LATEST_MODERN_VERSION: Final = max(MODERN_VERSIONS)

# The results that carry ttlMs and cacheScope in the 2026-07-28 era: the lists and the reads.
_LIST_METHODS: Final = frozenset(
    {"tools/list", "prompts/list", "resources/list", "resources/templates/list", "resources/read"}
)

_Params = dict[str, Any]


class RequestError(MCPFaultError):
    """Answer the request with this JSON-RPC error."""

    def __init__(self, code: int, message: str, data: Any = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.data = data


def _bad_params(why: str) -> RequestError:
    # The SDK's message for any malformed params; `data` says what was wrong.
    return RequestError(INVALID_PARAMS, "Invalid request parameters", why)


class Session:
    """One stdio connection: its protocol era and handshake state, and the answer to each request."""

    def __init__(self, world: World, spans: SpanRecorder | None = None, journal: Journal | None = None) -> None:
        self.world = world
        self._journal = journal
        self._spans = RequestSpans(spans) if spans is not None else None
        self.era = Era.UNKNOWN
        self.initialized = False
        self._tool_listing: list[dict[str, Any]] | None = None
        self._methods: dict[str, Callable[[_Params], dict[str, Any]]] = {
            "tools/list": self._list_tools,
            "tools/call": self._call_tool,
            "resources/list": self._list_resources,
            "resources/templates/list": lambda _params: {"resourceTemplates": resources.list_templates()},
            "resources/read": self._read_resource,
            "resources/subscribe": lambda params: self._subscription(params, subscribe=True),
            "resources/unsubscribe": lambda params: self._subscription(params, subscribe=False),
            "prompts/list": lambda _params: {"prompts": [resources.PROMPT]},
            "prompts/get": self._get_prompt,
        }
        self._subscribed: set[str] = set()
        # Announce a changed resource list only to a client that has listed it: one that uses tools
        # alone gets the very bytes it got before the server had resources.
        self._listed_resources = False
        self._notes: list[dict[str, Any]] = []  # notifications to send after the current answer

    def handle_line(self, line: bytes) -> bytes | None:
        """The encoded response to one input line, or None when the line asks for no answer."""
        if not line.strip():
            return None
        message = parse(line)
        if message.kind is MessageKind.REQUEST:
            assert message.body is not None
            if self._spans is not None:
                answer = encode(self._spans.handle(self, message.body))
            else:
                answer = encode(self.handle(message.body))
            if self._notes:  # after the answer, as a server announces what its write changed
                answer += b"".join(encode(note) for note in self._notes)
                self._notes.clear()
            return answer
        if message.kind is MessageKind.OPAQUE:
            print(f"{SERVER_NAME}: ignored an input line: {message.why_opaque}", file=sys.stderr, flush=True)
        # Notifications (initialized, cancelled, ...) need nothing; this server sends no requests to answer.
        return None

    def handle(self, request: dict[str, Any]) -> dict[str, Any]:
        """The response to one JSON-RPC request."""
        request_id = request["id"]
        if request_id is None:
            return error_response(None, INVALID_REQUEST, "Invalid Request", "a request id must be a string or number")
        try:
            result = self._dispatch(request["method"], request.get("params"), "params" in request)
        except RequestError as exc:
            return error_response(request_id, exc.code, exc.message, exc.data)
        except Exception as exc:  # a bug here must cost one request, not the server
            import traceback

            traceback.print_exc(file=sys.stderr)
            return error_response(request_id, INTERNAL_ERROR, f"Internal error: {type(exc).__name__}: {exc}")
        return {"jsonrpc": "2.0", "id": request_id, "result": result}

    def _dispatch(self, method: str, raw_params: Any, has_params: bool) -> dict[str, Any]:
        params: _Params | None = raw_params if isinstance(raw_params, dict) else None
        meta = params.get("_meta") if params is not None else None
        enveloped = isinstance(meta, dict) and META_PROTOCOL_VERSION in meta
        if self.era is Era.UNKNOWN:
            self.era = Era.MODERN if enveloped and method != "initialize" else Era.LEGACY
        if self.era is Era.MODERN:
            return self._modern(method, params)
        if enveloped and method != "initialize":
            raise RequestError(
                INVALID_REQUEST,
                "this connection serves the handshake protocol era; "
                f"requests carrying the {LATEST_MODERN_VERSION} envelope are not accepted on it",
            )
        if has_params and params is None:
            raise _bad_params("params must be an object")
        return self._legacy(method, params or {})

    # -- 2025-11-25: initialize, then requests on the session --

    def _legacy(self, method: str, params: _Params) -> dict[str, Any]:
        if method == "initialize":
            return self._initialize(params)
        if method == "ping":
            return {}
        handler = self._methods.get(method)
        if handler is None:
            raise RequestError(METHOD_NOT_FOUND, "Method not found", method)
        if not self.initialized:
            raise _bad_params(f"{method} before initialize: the session starts with an initialize request")
        return handler(params)

    def _initialize(self, params: _Params) -> dict[str, Any]:
        version = params.get("protocolVersion")
        if not (
            isinstance(version, str)
            and isinstance(params.get("capabilities"), dict)
            and isinstance(params.get("clientInfo"), dict)
        ):
            raise _bad_params("initialize needs protocolVersion (a string), capabilities and clientInfo (objects)")
        self.initialized = True
        return {
            "protocolVersion": version if version in LEGACY_VERSIONS else LATEST_LEGACY_VERSION,
            "capabilities": CAPABILITIES,
            "serverInfo": SERVER_INFO,
            "instructions": INSTRUCTIONS,
        }

    # -- 2026-07-28: every request stands alone, with its envelope in _meta --

    def _modern(self, method: str, params: _Params | None) -> dict[str, Any]:
        if method == "initialize":
            requested = params.get("protocolVersion") if params is not None else None
            data: dict[str, Any] = {"supported": list(MODERN_VERSIONS)}
            if isinstance(requested, str):
                data["requested"] = requested
            raise RequestError(
                UNSUPPORTED_PROTOCOL_VERSION,
                f"connection is serving the {LATEST_MODERN_VERSION} protocol; the initialize handshake is not accepted",
                data,
            )
        meta = params.get("_meta") if params is not None else None
        if not isinstance(meta, dict):
            raise RequestError(
                INVALID_PARAMS,
                f"params._meta must be an object carrying the required {META_PROTOCOL_VERSION!r} and "
                f"{META_CLIENT_CAPABILITIES!r} envelope keys",
            )
        missing = [key for key in (META_PROTOCOL_VERSION, META_CLIENT_CAPABILITIES) if key not in meta]
        if missing:
            raise RequestError(
                INVALID_PARAMS, f"params._meta is missing the required envelope key(s): {', '.join(missing)}"
            )
        version = meta[META_PROTOCOL_VERSION]
        if not isinstance(version, str):
            raise RequestError(INVALID_PARAMS, "the protocol-version envelope value must be a string")
        if version not in MODERN_VERSIONS:
            raise RequestError(
                UNSUPPORTED_PROTOCOL_VERSION,
                "Unsupported protocol version",
                {"supported": list(MODERN_VERSIONS), "requested": version},
            )
        if not isinstance(meta[META_CLIENT_CAPABILITIES], dict):
            raise _bad_params(f"{META_CLIENT_CAPABILITIES} must be an object")
        assert params is not None  # it holds _meta
        if method == "server/discover":
            result: dict[str, Any] = {
                "supportedVersions": list(MODERN_VERSIONS),
                "capabilities": CAPABILITIES,
                "instructions": INSTRUCTIONS,
            }
        else:
            handler = self._methods.get(method)
            if handler is None:
                raise RequestError(METHOD_NOT_FOUND, "Method not found", method)
            result = handler(params)
        result["resultType"] = "complete"
        if method in _LIST_METHODS or method == "server/discover":
            result["ttlMs"] = 0
            result["cacheScope"] = "private"
        result["_meta"] = {META_SERVER_INFO: SERVER_INFO}
        return result

    # -- tools, the same in both eras --

    def replay(self) -> int:
        """Re-apply the journal's state changes (a restarted server's memory); how many were replayed."""
        if self._journal is None:
            return 0
        return self._journal.replay(self._replay_call)

    def _replay_call(self, name: str, arguments: Any) -> int:
        tool = TOOLS.get(name)
        if tool is None:
            raise JournalError(f"the journal names a tool this server does not have: {name!r}")
        try:
            tool.call(self.world, arguments)
        except (MockWorldError, KeyError, TypeError) as exc:
            raise JournalError(f"the journal's {name} call {arguments!r} does not apply: {exc}") from None
        return self.world.revision

    def _list_tools(self, params: _Params) -> dict[str, Any]:
        if self._tool_listing is None:
            self._tool_listing = [tool.listing() for tool in TOOLS.values()]
        return {"tools": self._tool_listing}

    def _call_tool(self, params: _Params) -> dict[str, Any]:
        name = params.get("name")
        if not isinstance(name, str):
            raise _bad_params("tools/call needs params.name, the tool's name (a string)")
        arguments = params.get("arguments")
        if arguments is None:
            arguments = {}
        elif not isinstance(arguments, dict):
            raise _bad_params("params.arguments must be an object mapping argument names to values")
        tool = TOOLS.get(name)
        if tool is None:
            raise RequestError(INVALID_PARAMS, f"Unknown tool: {name!r}. The tools are: {', '.join(TOOLS)}.")
        problems = argument_problems(tool.input_schema, arguments)
        if problems:
            raise RequestError(INVALID_PARAMS, f"Invalid arguments for tool {name!r}: {'; '.join(problems)}.")
        revision = self.world.revision
        watched = None if tool.annotations.get("readOnlyHint") else resources.snapshot(self.world, self._subscribed)
        try:
            structured = tool.call(self.world, arguments)
            if watched is not None:
                self._notes += resources.changes(self.world, watched, self._subscribed, self._listed_resources)
        except MockWorldError as exc:
            text = f"Error executing tool {name}: {exc}"
            return {"content": [{"type": "text", "text": text}], "isError": True}
        if self._journal is not None and self.world.revision != revision:
            self._journal.append(name, arguments, self.world.revision)  # before the answer: a lost one still counts
        text = jsontext.indented(structured, ensure_ascii=False)
        return {"content": [{"type": "text", "text": text}], "structuredContent": structured, "isError": False}

    # -- resources and the prompt (mock/resources.py) --

    def _list_resources(self, params: _Params) -> dict[str, Any]:
        self._listed_resources = True
        return {"resources": resources.list_resources(self.world)}

    def _read_resource(self, params: _Params) -> dict[str, Any]:
        uri = params.get("uri")
        if not isinstance(uri, str):
            raise _bad_params("resources/read needs params.uri, the resource's URI (a string)")
        try:
            return resources.read(self.world, uri)
        except resources.ResourceNotFound:
            # -32602, as 2026-07-28 asks for "resource not found"; data names the URI.
            raise RequestError(INVALID_PARAMS, f"Resource not found: {uri}", {"uri": uri}) from None

    def _subscription(self, params: _Params, *, subscribe: bool) -> dict[str, Any]:
        uri = params.get("uri")
        if not isinstance(uri, str):
            raise _bad_params("resources/subscribe and resources/unsubscribe need params.uri (a string)")
        if subscribe:
            self._read_resource(params)  # an unknown URI is refused, not watched
            self._subscribed.add(uri)
        else:
            self._subscribed.discard(uri)
        return {}

    def _get_prompt(self, params: _Params) -> dict[str, Any]:
        name = params.get("name")
        if name != resources.PROMPT_NAME:
            raise RequestError(INVALID_PARAMS, f"Unknown prompt: {name!r}. The prompts are: {resources.PROMPT_NAME}.")
        arguments = params.get("arguments") or {}
        if not isinstance(arguments, dict):
            raise _bad_params("params.arguments must be an object mapping argument names to strings")
        try:
            return resources.get_prompt(self.world, arguments)
        except KeyError as exc:
            raise RequestError(INVALID_PARAMS, f"Missing required arguments: {{{exc.args[0]!r}}}") from None
        except MockWorldError as exc:
            raise RequestError(INVALID_PARAMS, str(exc)) from None
