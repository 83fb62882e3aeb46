"""A task's trace as the steps of a waterfall: what ``report.html`` draws when a task is opened.

``task_nodes`` finds every task's tree in a run's span files (the harness's, the proxy's and the
server's spans of each session, joined by ``analysis.trace_tree``); ``waterfall`` flattens one tree
into ``Step``s in tree order, each with its offset from the task's start and what it shows: faults,
what the client received, attempts and backoffs, state changes, and a write that ran twice.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from opentelemetry.trace import SpanKind

from mcpfault.analysis import trace_tree, traces
from mcpfault.telemetry import names
from mcpfault.telemetry.span_files import COMPRESSED_SUFFIX, SpanView


@dataclass(frozen=True, slots=True)
class Step:
    """One span of a task's waterfall."""

    depth: int
    kind: str  # task, attempt, proxy, server, model, span
    name: str
    start_ms: float  # since the task started
    duration_ms: float
    detail: str  # what matters for a failure: faults, what the client received, state changes
    marks: tuple[str, ...] = ()  # fault, failure, error, duplicate

    def compact(self) -> list[Any]:
        """The step as report.js reads it: a list, in this order (smaller than an object per span)."""
        start, duration = round(self.start_ms, 3), round(self.duration_ms, 3)
        return [self.depth, self.kind, self.name, start, duration, self.detail, list(self.marks)]


def task_nodes(run_dir: Path) -> dict[tuple[str, int], trace_tree.Node]:
    """(trace id, task index) -> the task's tree, for every session directory under ``run_dir``.

    The pair is unique whether each task has a trace of its own or, in runs before that, its session's.
    """
    found: dict[tuple[str, int], trace_tree.Node] = {}
    sessions = {
        path.parent
        for pattern in (traces.CLIENT_SPANS, traces.CLIENT_SPANS + COMPRESSED_SUFFIX)
        for path in run_dir.rglob(pattern)
    }
    for session in sorted(sessions):
        spans = traces.read_session_spans(session)
        roots = trace_tree.trees([*spans.client, *spans.proxy, *spans.server])
        for node in trace_tree.tasks(roots):
            index = node.span.attributes.get(names.TASK_INDEX)
            assert isinstance(index, int)  # tasks() finds the spans that have it
            found[(node.span.trace_id, index)] = node
    return found


def waterfall(task: trace_tree.Node) -> tuple[Step, ...]:
    """The task's spans in tree order, each with its offset from the task's start and what it shows.

    An incident the server created beyond the first under this task is marked ``duplicate``: a write
    that ran twice, what makes a blind retry a silent failure.
    """
    started = task.span.start_unix_nano
    steps: list[Step] = []
    incidents = 0

    def visit(node: trace_tree.Node, depth: int) -> None:
        nonlocal incidents
        span = node.span
        kind, detail, marks = _describe(span)
        for event in span.events:
            if event.name != names.EVENT_STATE_CHANGE:
                continue
            created = (
                event.attributes.get(names.STATE_OP) == "open_incident"
                and event.attributes.get(names.STATE_CHANGED) is True
            )
            if created:
                incidents += 1
                if incidents > 1:
                    marks = (*marks, "duplicate")
        steps.append(
            Step(
                depth=depth,
                kind=kind,
                name=span.name,
                start_ms=(span.start_unix_nano - started) / 1e6,
                duration_ms=max(0.0, span.duration_s * 1000),
                detail=detail,
                marks=marks,
            )
        )
        for child in node.children:
            visit(child, depth + 1)

    visit(task, 0)
    return tuple(steps)


def _describe(span: SpanView) -> tuple[str, str, tuple[str, ...]]:
    """(kind, detail, marks) of one span."""
    attrs = span.attributes
    parts: list[str] = []
    marks: list[str] = []
    if isinstance(attrs.get(names.TASK_INDEX), int):
        kind = "task"
        parts += [f"task {_text(attrs[names.TASK_INDEX])}", f"outcome {_text(attrs.get(names.TASK_OUTCOME, '?'))}"]
    elif names.CLIENT_RECEIVED in attrs:  # the proxy's span (its service can be renamed)
        kind = "proxy"
        faults = traces.proxy_faults(span)
        if faults:
            parts.append("fault " + ", ".join(f"{t}/{m}" for t, m in faults))
            marks.append("fault")
        parts.append(f"client received: {_text(attrs[names.CLIENT_RECEIVED])}")
    elif attrs.get(names.GEN_AI_OPERATION_NAME) == names.GEN_AI_OPERATION_CHAT:
        kind = "model"
        parts.append(f"model {_text(attrs.get(names.GEN_AI_REQUEST_MODEL, '?'))}")
        if names.LLM_TURN in attrs:
            parts.append(f"turn {_text(attrs[names.LLM_TURN])}")
    elif span.kind is SpanKind.SERVER:
        kind = "server"
        for event in span.events:
            if event.name == names.EVENT_STATE_CHANGE:
                state = ", ".join(
                    f"{key.removeprefix('mcpfault.state.')}={_text(value)}" for key, value in event.attributes.items()
                )
                parts.append(f"state change {{{state}}}")
    elif span.kind is SpanKind.CLIENT:
        kind = "attempt"
        parts.append(f"attempt {_text(attrs.get(names.ATTEMPT, 1))}")
        backoff = attrs.get(names.BACKOFF_S)
        if isinstance(backoff, float) and backoff > 0:
            parts.append(f"after {1000 * backoff:.1f} ms backoff")
        if names.FAILURE in attrs:
            parts.append(f"failure {_text(attrs[names.FAILURE])}")
            marks.append("failure")
    else:
        kind = "span"
    if span.status_code.name == "ERROR":
        marks.append("error")
        if span.status_message:
            parts.append(f"error: {span.status_message}")
    return kind, " · ".join(parts), tuple(marks)


def _text(value: object) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)
