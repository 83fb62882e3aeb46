"""What every fault shares: the request the engine sees, what a fault may do, and the contract.

A fault is a frozen settings dataclass with a ``plan`` method (Toxiproxy's toxics, in Python).
The engine does everything generic (matching tools, ``after``, ``limit``, the probability roll);
a fault only says what happens to one request once its rule has fired. Faults are pure: they see
data and a seeded RNG, never a clock, a file or a socket.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from random import Random
from typing import Any, ClassVar, Literal, Protocol, runtime_checkable

from mcpfault.protocol import jsonrpc
from mcpfault.protocol.eras import META_PROTOCOL_VERSION
from mcpfault.telemetry.names import Received

# The request kinds whose name a rule's globs match, and the glob (rule key) each is matched with.
NAMED_KINDS: Mapping[str, str] = {
    "tools/call": "tools",
    "prompts/get": "prompts",
    "resources/read": "resources",
    "resources/subscribe": "resources",
    "resources/unsubscribe": "resources",
}
_COMPLETION_REFS: Mapping[Any, str] = {"ref/prompt": "prompts", "ref/resource": "resources"}


@dataclass(frozen=True, slots=True)
class Call:
    """A client-to-server request as the engine sees it."""

    method: str
    request_id: Any
    params: Mapping[str, Any]
    body: Mapping[str, Any]

    @property
    def kind(self) -> str | None:
        """Which of a rule's globs (``tools``, ``resources``, ``prompts``) this request's name is matched
        with; None for a request that names nothing (a list)."""
        kind = NAMED_KINDS.get(self.method)
        if kind is None and self.method == "completion/complete":
            ref = self.params.get("ref")
            kind = _COMPLETION_REFS.get(ref.get("type")) if isinstance(ref, Mapping) else None
        return kind

    @property
    def target(self) -> str | None:
        """The name a rule's glob matches: the tool of a tools/call, the prompt of a prompts/get, the URI of
        a resources/read (and of a completion's reference)."""
        kind = self.kind
        if kind is None:
            return None
        holder = self.params.get("ref") if self.method == "completion/complete" else self.params
        name = holder.get("uri" if kind == "resources" else "name") if isinstance(holder, Mapping) else None
        return name if isinstance(name, str) else None

    @property
    def modern(self) -> bool:
        """Sent in the 2026-07-28 era (per-request ``_meta`` protocol version)."""
        meta = self.params.get("_meta")
        return isinstance(meta, Mapping) and META_PROTOCOL_VERSION in meta

    @property
    def arguments(self) -> Mapping[str, Any]:
        args = self.params.get("arguments")
        return args if isinstance(args, Mapping) else {}

    @staticmethod
    def from_body(body: Mapping[str, Any]) -> Call:
        params = body.get("params")
        return Call(
            method=body["method"],
            request_id=body.get("id"),
            params=params if isinstance(params, Mapping) else {},
            body=body,
        )


@dataclass(frozen=True, slots=True)
class Delivery:
    """What reaches the client for one response: ``data`` (None when lost) after ``delay_s``;
    ``fields``: the result fields a corruption changed (what the judge compares with what a task reads)."""

    data: bytes | None
    delay_s: float = 0.0
    fields: tuple[str, ...] = ()


# A step turns the bytes of a response into what is delivered instead. Steps chain.
ResponseStep = Callable[[bytes], Delivery]

STDIO = "stdio"
HTTP = "http"
EVERY_TRANSPORT = frozenset({STDIO, HTTP})


class HttpExchangeOps(Protocol):
    """What an HTTP transport offers a fault acting on one exchange (proxy/http/exchange.py).

    Each returns the transport's response object, which the fault hands back untouched.
    """

    def status_answer(self, status: int, headers: tuple[tuple[str, str], ...]) -> Any:
        """An HTTP error status, its reason phrase as a plain-text body (as gateways send it)."""
        ...

    def json_error_answer(self, status: int, code: int, message: str) -> Any:
        """An HTTP status with a JSON-RPC error body."""
        ...

    def reset(self) -> Any:
        """Close the client's connection with no (further) bytes."""
        ...


class HttpBehaviour:
    """How a fault acts on one HTTP exchange, below JSON-RPC. A fault module subclasses it.

    The exchange calls the hooks at fixed points and never asks which fault it is carrying out:
    ``received`` is what the client gets in place of the answer (None: the answer itself, maybe late);
    when ``reaches_server`` is false, ``answer_instead`` makes the client's answer; ``first_byte_delay_s``
    holds everything, headers included; ``cut_after_events`` ends the response's event stream after that
    many events, before the answer; ``loses_answer``: the server answers, and the connection drops first;
    ``request_headers`` changes what the request carries to an HTTP server.
    """

    received: ClassVar[Received | None] = None
    reaches_server: ClassVar[bool] = True
    loses_answer: ClassVar[bool] = False

    @property
    def first_byte_delay_s(self) -> float:
        return 0.0

    @property
    def cut_after_events(self) -> int | None:
        return None

    def answer_instead(self, ops: HttpExchangeOps) -> Any:
        raise NotImplementedError(f"{type(self).__name__} reaches the server; it has no answer of its own")

    def request_headers(self, headers: list[tuple[str, str]]) -> list[tuple[str, str]]:
        """The headers the request is forwarded with (to an HTTP server), given those it would carry."""
        return headers


class ServerProcessOps(Protocol):
    """What a transport that owns the server process offers a process fault (proxy/process/supervisor.py).

    Each takes effect at once (a signal is sent before the call returns) and schedules its own
    continuation (the SIGCONT, the duty cycle, the memory watch); safe to call from any thread.
    """

    def crash(self, signal_name: str, *, delay_s: float = 0.0, cause: str = "crash") -> None:
        """Kill the server with ``signal_name``, ``delay_s`` from now; ``cause`` names the fault type."""
        ...

    def stall(self, duration_s: float) -> None:
        """SIGSTOP the server now, SIGCONT it ``duration_s`` later."""
        ...

    def starve(self, share: float, period_s: float, duration_s: float) -> None:
        """For ``duration_s``, let the server run only ``share`` of every ``period_s`` (SIGSTOP/SIGCONT)."""
        ...

    def kill_above_rss(self, rss_mb: float, *, cause: str) -> None:
        """SIGKILL the server once its resident memory exceeds ``rss_mb`` (sampled from /proc)."""
        ...


class ProcessBehaviour:
    """How a fault acts on the server process. A fault module subclasses it.

    ``perform`` runs before the triggering request is forwarded; with ``before_request`` the request
    is never forwarded (the server is gone before it could see it).

    With ``answer_lost`` the server's answer to the request never reaches the client: a transport that
    can hold it (the stdio proxy) keeps the request in flight and calls ``at_answer`` instead, and the
    request is answered as every request in flight is when the server's fate is known. That makes "the
    server acted, then died before its answer left" the same on every run, whatever the machine's load.
    """

    before_request: ClassVar[bool] = False
    answer_lost: ClassVar[bool] = False

    def perform(self, server: ServerProcessOps) -> None:
        raise NotImplementedError

    def at_answer(self, server: ServerProcessOps) -> None:
        """What happens when the server answers (``answer_lost`` only)."""


@dataclass(frozen=True, slots=True)
class AtAnswer(ProcessBehaviour):
    """A behaviour's ``at_answer``, as a behaviour a transport performs like any other."""

    behaviour: ProcessBehaviour

    def perform(self, server: ServerProcessOps) -> None:
        self.behaviour.at_answer(server)


@dataclass(frozen=True, slots=True)
class Injection:
    """What a fault does to one request.

    - ``reply``: answer the client directly; the server is never contacted.
    - ``upstream_request``: forward this body instead of the client's bytes.
    - ``response``: transform the server's response (or the reply) on its way back.
    - ``notify``: notifications sent to the client right away.
    - ``http``: how the fault acts on the HTTP exchange (HTTP transports only: see ``Fault.transports``).
    - ``process``: how the fault acts on the server process (transports that own it only).
    """

    mode: str
    reply: Mapping[str, Any] | None = None
    upstream_request: Mapping[str, Any] | None = None
    response: ResponseStep | None = None
    notify: tuple[Mapping[str, Any], ...] = ()
    http: HttpBehaviour | None = None
    process: ProcessBehaviour | None = None


@dataclass(frozen=True, slots=True)
class PlanContext:
    """Read-only facts the engine lends a fault while it plans."""

    rule_name: str
    matches_tool: Callable[[str], bool]
    history: Callable[[Call], tuple[bytes, ...]] = field(default=lambda _call: ())
    activating: bool = False  # a persistent fault is firing for the first time
    in_session: bool = False  # the request belongs to a session (an HTTP Mcp-Session-Id)
    # The server's own description of a tool (its tools/list entry), once a tools/list answer has been seen.
    tool: Callable[[str], Mapping[str, Any] | None] = field(default=lambda _name: None)
    seed: int = 0  # the profile's seed, for choices that must stay the same on every call (drift's auto names)
    methods: frozenset[str] = frozenset({"tools/call"})  # the rule's ``methods``
    # The server's own description of a prompt (its prompts/list entry), as ``tool`` for tools.
    prompt: Callable[[str], Mapping[str, Any] | None] = field(default=lambda _name: None)
    # Whether the rule's glob for a kind ("tools", "resources", "prompts") matches a name.
    matches: Callable[[str, str], bool] = field(default=lambda _kind, _name: True)


# How the analysis (analysis/effects.py) tells whether one application of a fault changed what the
# client received, i.e. changed something the task's answer depends on. Each fault type declares one
# as its class attribute ``effect``; none is one type's own: a new type picks the one that describes
# what it does to an answer (or adds a value here and its rule in analysis/effects.py):
# - "always": every application counts (when in doubt: "touched, no effect" is never a guess);
# - "failure": only when the client's attempt failed (a delay inside its deadline changed nothing);
# - "outdated": the answer was computed at an earlier server state (it carries its revision,
#   ``as_of``): only when a write since then changed a field the task reads;
# - "changed_fields": the fault changed named result fields of the answer (``Delivery.fields``, which
#   the proxy's event carries: corrupted, renamed, made plausibly wrong): only when the attempt failed
#   or one of those is a field the task reads; one that names none counts (an unnamed change), unless
#   the type ``names_every_change``.
Effect = Literal["always", "failure", "outdated", "changed_fields"]


@runtime_checkable
class Fault(Protocol):
    """One fault type: a frozen dataclass of settings plus ``plan``.

    ``type_name`` is the name profiles use; ``MODES`` are the modes it reports; ``event_name`` is the
    span event each application leaves on the proxy's span (a constant of telemetry/names.py);
    ``targets`` are the methods on which a rule of this type can fire (a rule picks among them with
    ``methods``; ``methods_allowed`` narrows them for settings that make sense on fewer), ``transports`` the transports
    that can carry it out (a rule whose fault needs HTTP never fires behind the stdio proxy), and a
    fault that ``needs_process`` fires only where the proxy started the server itself. A
    ``persistent`` fault stays in force after it first fires and is planned for every later
    matching request, including those in ``follows``. ``effect`` says how the analysis tells whether
    an application changed what the client received (see ``Effect``).
    """

    type_name: ClassVar[str]
    MODES: ClassVar[tuple[str, ...]]
    event_name: ClassVar[str]
    targets: ClassVar[frozenset[str]]
    transports: ClassVar[frozenset[str]]
    needs_process: ClassVar[bool]  # acts on the server process: only where the proxy started the server
    persistent: ClassVar[bool]
    follows: ClassVar[frozenset[str]]
    effect: ClassVar[Effect]
    names_every_change: ClassVar[bool]  # with "changed_fields": an application naming no field changed none
    needs_tools: ClassVar[bool]  # the engine learns tools/list answers for ctx.tool

    def methods_allowed(self) -> frozenset[str]:
        """The methods a rule with these settings may name (``targets``, or fewer)."""
        ...

    def history_depth(self) -> int:
        """How many earlier responses per (tool, arguments) the engine keeps for ``ctx.history`` (0: none)."""
        ...

    def plan(self, call: Call, rng: Random, ctx: PlanContext) -> Injection | None:
        """What happens to ``call``; None when the fault cannot apply to it (the rule does not fire)."""
        ...

    def handshake(self, call: Call) -> ResponseStep | None:
        """A change to the handshake answer (initialize, server/discover), whether or not fired."""
        ...

    def draws(self) -> bool:
        """Whether ``plan`` draws from its rng with these settings (a jitter, a mode picked per injection)."""
        ...

    def holds_server_s(self) -> float:
        """Seconds the server stays unable to answer anyone once this fires (a stall's pause), 0 for none;
        the analysis attributes later tasks' failures in that window to the task it fired in."""
        ...


TOOLS_CALL = frozenset({"tools/call"})
# The requests that read what a server offers: where timeout, latency, error, malformed and stale make sense too.
READS = frozenset(
    {
        "resources/read",
        "resources/list",
        "resources/templates/list",
        "prompts/get",
        "prompts/list",
        "completion/complete",
        "tools/list",
    }
)
# Every client-to-server request a rule may name (what HTTP faults, below JSON-RPC, can act on).
REQUESTS = TOOLS_CALL | READS | frozenset({"resources/subscribe", "resources/unsubscribe"})
# The requests a server sends the client: a ``direction = "server_to_client"`` rule acts on the client's answer.
SERVER_REQUESTS = frozenset({"sampling/createMessage", "elicitation/create", "roots/list"})
DIRECTIONS = ("client_to_server", "server_to_client")
# The notifications a rule may name (faults/notification.py), whichever side sends them.
PROGRESS = "notifications/progress"
CANCELLED = "notifications/cancelled"
LIST_CHANGED = frozenset(f"notifications/{kind}/list_changed" for kind in ("tools", "resources", "prompts"))
NOTIFICATIONS = frozenset({PROGRESS, CANCELLED}) | LIST_CHANGED


class FaultBase:
    """Defaults for the optional parts of the contract."""

    targets: ClassVar[frozenset[str]] = TOOLS_CALL
    transports: ClassVar[frozenset[str]] = EVERY_TRANSPORT
    needs_process: ClassVar[bool] = False
    persistent: ClassVar[bool] = False
    follows: ClassVar[frozenset[str]] = frozenset()
    effect: ClassVar[Effect] = "always"
    # With "changed_fields": whether every change an application makes to an answer is a field it names,
    # so that one naming none left the answer as sent (True for renames; False where a change may have
    # no name, a value in a list of scalars).
    names_every_change: ClassVar[bool] = False
    needs_tools: ClassVar[bool] = False
    # The failure class the judge gives a wrong answer when this fault affected the task (a lie the agent
    # believed: ``believed_lie``); None: the judge's own (``wrong_answer``).
    wrong_answer: ClassVar[str | None] = None

    def methods_allowed(self) -> frozenset[str]:
        return self.targets

    def history_depth(self) -> int:
        return 0

    def handshake(self, call: Call) -> ResponseStep | None:
        return None

    def draws(self) -> bool:
        return False

    def holds_server_s(self) -> float:
        return 0.0


def reply_with_id(message: Mapping[str, Any], request_id: Any) -> dict[str, Any]:
    return {**message, "id": request_id}


def load_object(data: bytes) -> dict[str, Any] | None:
    """Parse a response for a fault that rewrites it; None when it is not a JSON object."""
    try:
        body = json.loads(data)
    except (ValueError, RecursionError):
        return None
    return body if isinstance(body, dict) else None


def encode(message: Mapping[str, Any]) -> bytes:
    return jsonrpc.encode(dict(message))


def rewrite_text_json(result: dict[str, Any], structured: Any) -> None:
    """Servers echo structuredContent as JSON text; keep the two in agreement, as a real bug would
    (for the faults that change an answer's structured content: malformed, lie)."""
    for item in result.get("content") or []:
        if isinstance(item, dict) and item.get("type") == "text" and isinstance(item.get("text"), str):
            try:
                json.loads(item["text"])
            except ValueError:
                continue
            item["text"] = json.dumps(structured)
