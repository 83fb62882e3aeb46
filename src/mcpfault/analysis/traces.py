"""Outcomes' evidence from traces: each task's tree of spans across the three processes of a session.

```
task span (harness, INTERNAL, mcpfault.task.index)
 └─ attempt span (harness, CLIENT)        one per request sent for the task; retries are siblings
     └─ proxy span (proxy, SERVER)         mcpfault.fault.* when a fault fired; no server child when the
         └─ server span (mock, SERVER)     proxy answered itself (error, stale, a rejected drifted call)
               mcpfault.state_change events: what the server did, seen even when its answer was lost
```

Each level is joined to the one above by parent span id (within the trace), which the W3C trace
context in ``params._meta`` carries from process to process. The spans come from three sources
(the harness's, the proxy's and the server's files, or a trace store), kept apart so a server span
is known for one whatever the tree's depth: with ``mcpfault proxy --no-propagate`` a server span is
the attempt's own child.

Pure functions over ``SpanView`` lists; ``read_session_spans`` is the one reader of files.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from opentelemetry.trace import SpanKind

from mcpfault.analysis.effects import AttemptView, TaskReads, affects
from mcpfault.analysis.join import Sent, Touch, acted_after
from mcpfault.faults.catalog import CATALOG
from mcpfault.telemetry import names
from mcpfault.telemetry import names as span_names
from mcpfault.telemetry.span_files import COMPRESSED_SUFFIX
from mcpfault.telemetry.tracing import SpanView, read_spans

# The span files of a session directory, one per process.
CLIENT_SPANS: Final = "client-spans.jsonl"
PROXY_SPANS: Final = "proxy-spans.jsonl"
SERVER_SPANS: Final = "server-spans.jsonl"
SPAN_FILES: Final = (CLIENT_SPANS, PROXY_SPANS, SERVER_SPANS)

# The proxy marks each fault it applied with a span event carrying its type, mode and rule
# (proxy/span_endings.py); each fault type names its own event (``event_name``), unique in the catalog.
FAULT_OF_EVENT: Final = {fault_type.event_name: fault_type.type_name for fault_type in CATALOG}

_Key = tuple[str, str]  # (trace id, span id)


# The requests task code sends (harness/agents/tasks.py): what its attempts, retries and faults count.
TASK_METHODS = frozenset({"tools/call", "resources/read", "prompts/get"})


@dataclass(frozen=True, slots=True)
class SessionSpans:
    """A session's spans by the process that emitted them."""

    client: Sequence[SpanView] = ()
    proxy: Sequence[SpanView] = ()
    server: Sequence[SpanView] = ()


@dataclass(frozen=True, slots=True)
class AttemptTrace:
    """One request the harness sent: its span, the proxy's span of it, and the server's."""

    span: SpanView
    proxy: tuple[SpanView, ...] = ()
    server: tuple[SpanView, ...] = ()

    @property
    def method(self) -> str:
        return str(self.span.attributes.get(names.MCP_METHOD_NAME, ""))

    @property
    def request_id(self) -> str | None:
        value = self.span.attributes.get(names.JSONRPC_REQUEST_ID)
        return None if value is None else str(value)

    @property
    def number(self) -> int:
        value = self.span.attributes.get(span_names.ATTEMPT)
        return value if isinstance(value, int) else 1

    @property
    def target(self) -> str | None:
        """The tool, resource or prompt the request names (None for a list)."""
        for key in (names.GEN_AI_TOOL_NAME, names.MCP_RESOURCE_URI, names.GEN_AI_PROMPT_NAME):
            value = self.span.attributes.get(key)
            if value is not None:
                return str(value)
        return None

    @property
    def faults(self) -> list[tuple[str, str]]:
        """(type, mode) of every fault the proxy applied to this request, in the order it applied them."""
        return [fault for proxy in self.proxy for fault in proxy_faults(proxy)]

    @property
    def failed(self) -> bool:
        """The client got no usable answer (its span carries a failure class)."""
        return span_names.FAILURE in self.span.attributes

    @property
    def changed_fields(self) -> frozenset[str] | None:
        """The result fields the faults changed, as the proxy's events name them (None: none named)."""
        found = [
            event.attributes[names.FAULT_FIELDS]
            for proxy in self.proxy
            for event in proxy.events
            if names.FAULT_FIELDS in event.attributes
        ]
        if not found:
            return None
        return frozenset(str(f) for fields in found for f in (fields if isinstance(fields, tuple) else (fields,)))

    def view(self, revision: int | None, server_seen: bool, revisions: Revisions | None = None) -> AttemptView:
        """What decides whether its faults affected it; ``revision``: the server's when it was sent."""
        as_of = self.span.attributes.get(span_names.RESULT_AS_OF)
        tool = self.span.attributes.get(names.GEN_AI_TOOL_NAME)
        as_of = as_of if isinstance(as_of, int) else None
        changed = revisions.ops_between(as_of, revision) if revisions is not None and as_of is not None else None
        return AttemptView(
            tool=str(tool) if tool is not None else None,
            failed=self.failed,
            as_of=as_of,
            revision=revision,
            server_seen=server_seen,
            changed_ops=changed,
            changed_fields=self.changed_fields,
        )

    def effects(self, view: AttemptView, reads: TaskReads | None) -> list[tuple[str, str, bool]]:
        """(type, mode, whether it changed what the client received) of every fault applied to it."""
        return [(fault_type, mode, affects(fault_type, view, reads)) for fault_type, mode in self.faults]

    @property
    def state_changes(self) -> list[Mapping[str, Any]]:
        """The attributes of each write the server accepted while handling this request."""
        return [
            event.attributes
            for server in self.server
            for event in server.events
            if event.name == span_names.EVENT_STATE_CHANGE
        ]


@dataclass(frozen=True, slots=True)
class TaskTrace:
    """One task's span and every request sent for it, in the order they were sent."""

    span: SpanView
    attempts: tuple[AttemptTrace, ...] = field(default=())

    @property
    def index(self) -> int:
        value = self.span.attributes.get(span_names.TASK_INDEX)
        assert isinstance(value, int)  # task_traces only builds TaskTraces of spans that have it
        return value

    @property
    def tool_calls(self) -> tuple[AttemptTrace, ...]:
        """The attempts task code sent: tools/call, resources/read, prompts/get (tools/list refreshes are
        the agent's own)."""
        return tuple(a for a in self.attempts if a.method in TASK_METHODS)

    @property
    def retries(self) -> int:
        """Attempts beyond the first of each logical call."""
        return sum(1 for a in self.tool_calls if a.number > 1)

    @property
    def incidents_created(self) -> list[str]:
        """Ids of the incidents the server created for this task, one per creation."""
        return [
            str(change.get(span_names.STATE_INCIDENT_ID))
            for attempt in self.tool_calls
            for change in attempt.state_changes
            if change.get(span_names.STATE_OP) == "open_incident" and change.get(span_names.STATE_CHANGED) is True
        ]

    @property
    def duplicates(self) -> int:
        """Incidents created beyond the first: a write that ran twice."""
        return max(0, len(self.incidents_created) - 1)

    def touch(
        self, reads: TaskReads | None = None, revisions: Revisions | None = None, *, rereads: bool = False
    ) -> Touch | None:
        """The faults that reached the task's tool calls, or None when none did.

        Times are Unix seconds: ``first_fault_at`` the start of the first faulted attempt (and
        ``first_affected_at`` of the first one a fault affected), ``ended_at`` the task span's end, so
        their difference is the task's recovery time. ``revisions`` (the server's writes) and ``reads``
        (what the task's code reads) decide which faults changed what the client received.
        """
        touch: Touch | None = None
        for attempt in self.tool_calls:
            if not attempt.faults:
                continue
            if touch is None:
                touch = Touch(ended_at=self.span.end_unix_nano / 1e9)
            started = attempt.span.start_unix_nano
            view = attempt.view(
                revisions.at(started) if revisions is not None else None,
                server_seen=revisions is not None,
                revisions=revisions,
            )
            touch.add(started / 1e9, attempt.request_id, attempt.effects(view, reads))
        if touch is not None and touch.first_affected_at is not None:
            sent = [Sent(a.span.start_unix_nano / 1e9, a.method, a.target, a.number) for a in self.attempts]
            touch.acted_after_affected = acted_after(sent, touch.first_affected_at, rereads=rereads)
        return touch

    @property
    def recovery_s(self) -> float | None:
        """From the first faulted attempt's start to the task's end; None when no fault touched it."""
        faulted = next((a for a in self.tool_calls if a.faults), None)
        if faulted is None:
            return None
        return (self.span.end_unix_nano - faulted.span.start_unix_nano) / 1e9


@dataclass(frozen=True, slots=True)
class Revisions:
    """The server's revision over time, from the writes its spans record (a stale answer's yardstick)."""

    writes: tuple[tuple[int, int], ...] = ()  # (server span start, Unix ns; revision after the write), by time
    ops: Mapping[int, str] = field(default_factory=dict)  # revision after a write -> its op

    @staticmethod
    def of(server: Iterable[SpanView]) -> Revisions:
        found = []
        ops = {}
        for span in server:
            for event in span.events:
                revision = event.attributes.get(span_names.STATE_REVISION)
                if event.name == span_names.EVENT_STATE_CHANGE and isinstance(revision, int):
                    found.append((span.start_unix_nano, revision))
                    ops[revision] = str(event.attributes.get(span_names.STATE_OP, ""))
        return Revisions(tuple(sorted(found)), ops)

    def at(self, unix_nano: int) -> int | None:
        """The revision of the last write the server began before ``unix_nano``; None: no write yet."""
        before = [revision for started, revision in self.writes if started < unix_nano]
        return max(before) if before else None

    def ops_between(self, as_of: int, revision: int | None) -> frozenset[str] | None:
        """The ops of the writes after revision ``as_of`` up to ``revision``; None when one is not known."""
        if revision is None:
            return frozenset()
        found = set()
        for number in range(as_of + 1, revision + 1):
            op = self.ops.get(number)
            if op is None or not op:
                return None  # a revision with no write event: something changed that the spans do not say
            found.add(op)
        return frozenset(found)


def proxy_faults(span: SpanView) -> list[tuple[str, str]]:
    """(type, mode) of each fault a proxy span records, in the order the proxy applied them.

    Each applied fault left an event with its type, mode and rule, in order; the span's own attributes
    name the first. A span from a proxy that left no event for some fault (an error answer, in versions
    before every fault had one) still has that first fault in its attributes: it leads the list.
    """
    from_events = [
        (
            str(e.attributes.get(names.FAULT_TYPE, FAULT_OF_EVENT[e.name])),
            str(e.attributes.get(names.FAULT_MODE)),
            e.attributes.get(names.FAULT_RULE),
        )
        for e in span.events
        if e.name in FAULT_OF_EVENT
    ]
    found = [(fault_type, mode) for fault_type, mode, _ in from_events]
    first_type = span.attributes.get(names.FAULT_TYPE)
    if first_type is not None and span.attributes.get(names.FAULT_RULE) not in {rule for *_, rule in from_events}:
        return [(str(first_type), str(span.attributes.get(names.FAULT_MODE))), *found]
    return found


def _children(spans: Iterable[SpanView]) -> dict[_Key, list[SpanView]]:
    found: dict[_Key, list[SpanView]] = {}
    for span in spans:
        if span.parent_span_id is not None:
            found.setdefault((span.trace_id, span.parent_span_id), []).append(span)
    return found


def _by_start(spans: Iterable[SpanView]) -> tuple[SpanView, ...]:
    return tuple(sorted(spans, key=lambda s: s.start_unix_nano))


def task_traces(spans: SessionSpans) -> dict[int, TaskTrace]:
    """Task index -> the task's tree, for every task span among ``spans.client`` (the last, if one repeats)."""
    client_children = _children(s for s in spans.client if s.kind is SpanKind.CLIENT)
    proxy_children = _children(spans.proxy)
    server_children = _children(spans.server)
    tasks: dict[int, TaskTrace] = {}
    for task in _by_start(s for s in spans.client if isinstance(s.attributes.get(span_names.TASK_INDEX), int)):
        attempts = []
        for attempt in _by_start(client_children.get((task.trace_id, task.span_id), ())):
            key = (attempt.trace_id, attempt.span_id)
            proxies = _by_start(proxy_children.get(key, ()))
            # The server's span is the proxy's child, or its CLIENT span's (``proxy --client-spans``).
            legs = [
                c for p in proxies for c in proxy_children.get((p.trace_id, p.span_id), ()) if c.kind is SpanKind.CLIENT
            ]
            servers = [s for p in (*proxies, *legs) for s in server_children.get((p.trace_id, p.span_id), ())]
            servers += server_children.get(key, ())  # the proxy passed the client's context on untouched
            attempts.append(AttemptTrace(attempt, proxies, _by_start(servers)))
        trace = TaskTrace(task, tuple(attempts))
        tasks[trace.index] = trace
    return tasks


def touches(
    tasks: Mapping[int, TaskTrace],
    reads: Mapping[int, TaskReads] | None = None,
    revisions: Revisions | None = None,
    *,
    rereads: bool = False,
) -> dict[int, Touch]:
    """Task index -> the faults that reached it, for the tasks a fault reached (as ``join.touches_by_task``).

    ``reads`` (per task) and ``revisions`` decide which of them changed what the client received.
    """
    found = {index: trace.touch((reads or {}).get(index), revisions, rereads=rereads) for index, trace in tasks.items()}
    return {index: touch for index, touch in found.items() if touch is not None}


def compare_touches(by_trace: Mapping[int, Touch], by_request: Mapping[int, Touch]) -> list[str]:
    """Where the trace join and the request-id join disagree: fault types, modes, first faulted request.

    Empty when they agree on every task. Both joins read what the proxy recorded of the same requests
    (spans and events, written side by side), so any line here is a bug, not a race.
    """
    problems = []
    for index in sorted(set(by_trace) | set(by_request)):
        spans, events = by_trace.get(index), by_request.get(index)
        if spans is None or events is None:
            seen = spans or events
            assert seen is not None
            side = "the traces" if spans is not None else "the proxy's events"
            problems.append(f"task {index}: only {side} show faults ({', '.join(seen.fault_modes)})")
            continue
        for what, left, right in (
            ("fault types", spans.fault_types, events.fault_types),
            ("fault modes", spans.fault_modes, events.fault_modes),
            ("first faulted request", str(spans.first_fault_request), str(events.first_fault_request)),
        ):
            if left != right:
                problems.append(f"task {index}: {what} {left!r} in the traces, {right!r} in the proxy's events")
    return problems


def read_session_spans(directory: Path) -> SessionSpans:
    """The three span files of a session directory; a missing file reads as no spans."""

    def spans(name: str) -> list[SpanView]:
        path = directory / name
        written = path.exists() or path.with_name(name + COMPRESSED_SUFFIX).exists()  # a bench gzips them
        return read_spans(path) if written else []

    return SessionSpans(spans(CLIENT_SPANS), spans(PROXY_SPANS), spans(SERVER_SPANS))
