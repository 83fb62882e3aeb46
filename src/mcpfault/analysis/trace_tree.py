"""A run's spans as trees, for reading in a terminal (``mcpfault traces show``): no Jaeger needed.

Every ``*spans.jsonl`` under a run directory is read (the harness's, the proxy's, the server's); spans
join by parent id into one tree per trace, and each span gets a one-line label with what matters for
a failure: the task's outcome, an attempt's number and failure, the proxy's faults and what the client
received, the server's state changes. Pure: spans in, trees and labels out.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from opentelemetry.trace import SpanKind

from mcpfault.analysis.summary import AGENT_ORDER, PROFILE_ORDER, ordered
from mcpfault.analysis.traces import SPAN_FILES, proxy_faults
from mcpfault.telemetry import names
from mcpfault.telemetry.span_files import COMPRESSED_SUFFIX, SpanView, find_span_files, read_spans

_STATE_PREFIX = "mcpfault.state."


@dataclass(slots=True)
class Node:
    span: SpanView
    children: list[Node] = field(default_factory=list)


# What marks a directory as a run's: a run's or a bench's records, an experiment's journal, or a
# session's span files (a bench's sessions/PROFILE/AGENT/sNNN).
RUN_MARKERS: Final = ("records.jsonl", "journal.jsonl", *SPAN_FILES, *(name + COMPRESSED_SUFFIX for name in SPAN_FILES))


def check_run_dir(run_dir: Path) -> None:
    """Raise ValueError, saying what to give instead, unless ``run_dir`` is a run's --out directory."""
    if not run_dir.is_dir():
        raise ValueError(f"{run_dir} is not a directory; give the --out directory of a run, bench or experiment")
    if not any((run_dir / marker).is_file() for marker in RUN_MARKERS):
        raise ValueError(
            f"{run_dir} is not a run's directory: it holds none of {', '.join(RUN_MARKERS)}; give the --out "
            "directory of `mcpfault run`, `bench` or `experiment run` (or one of a bench's session directories)"
        )


def read_run(run_dir: Path) -> list[SpanView]:
    """Every span written under ``run_dir`` (a run's or a bench's --out directory)."""
    spans: list[SpanView] = []
    for path in find_span_files(run_dir):  # as written, or compressed by the bench
        spans.extend(read_spans(path))
    return spans


def trees(spans: Iterable[SpanView]) -> list[Node]:
    """One root per span whose parent is not among ``spans``, children in start order."""
    nodes = {(s.trace_id, s.span_id): Node(s) for s in spans}
    roots: list[Node] = []
    for node in sorted(nodes.values(), key=lambda n: n.span.start_unix_nano):
        parent = nodes.get((node.span.trace_id, node.span.parent_span_id or ""))
        (parent.children if parent is not None else roots).append(node)
    return roots


def tasks(roots: Sequence[Node]) -> list[Node]:
    """The task spans (the harness's ``mcpfault.task ...``) anywhere in ``roots``, in start order."""
    found: list[Node] = []

    def visit(node: Node) -> None:
        if isinstance(node.span.attributes.get(names.TASK_INDEX), int):
            found.append(node)
            return
        for child in node.children:
            visit(child)

    for root in roots:
        visit(root)
    return sorted(found, key=lambda n: n.span.start_unix_nano)


@dataclass(frozen=True, slots=True)
class TaskRow:
    """One task span as ``traces show`` lists it."""

    node: Node
    profile: str
    agent: str
    session: int | None
    index: int
    workflow: str
    outcome: str
    faults: tuple[str, ...]

    @property
    def trace_id(self) -> str:
        return self.node.span.trace_id


def task_rows(
    roots: Sequence[Node],
    *,
    outcome: str | None = None,
    profile: str | None = None,
    agent: str | None = None,
) -> list[TaskRow]:
    """The task spans in ``roots`` that match every filter given, sorted by profile (in the report's
    order), agent, session and task."""
    rows = []
    for node in tasks(roots):
        attrs = node.span.attributes
        session = attrs.get(names.SESSION_INDEX)
        index = attrs.get(names.TASK_INDEX)
        assert isinstance(index, int)  # tasks() finds the spans that have it
        row = TaskRow(
            node=node,
            profile=_text(attrs.get(names.PROFILE, "")),
            agent=_text(attrs.get(names.AGENT, "")),
            session=session if isinstance(session, int) else None,
            index=index,
            workflow=_text(attrs.get(names.TASK_WORKFLOW, "")),
            outcome=_text(attrs.get(names.TASK_OUTCOME, "")),
            faults=tuple(task_faults(node)),
        )
        if outcome is not None and row.outcome != outcome:
            continue
        if profile is not None and row.profile != profile:
            continue
        if agent is not None and row.agent != agent:
            continue
        rows.append(row)
    profiles = {p: i for i, p in enumerate(ordered((r.profile for r in rows), PROFILE_ORDER))}
    agents = {a: i for i, a in enumerate(ordered((r.agent for r in rows), AGENT_ORDER))}
    return sorted(
        rows,
        key=lambda r: (profiles[r.profile], agents[r.agent], -1 if r.session is None else r.session, r.index),
    )


def task_faults(node: Node) -> list[str]:
    """``type/mode`` of every fault the proxy applied under a task, in order."""
    found: list[str] = []

    def visit(n: Node) -> None:
        if _is_proxy(n.span):
            found.extend(f"{t}/{m}" for t, m in proxy_faults(n.span))
        for child in n.children:
            visit(child)

    visit(node)
    return found


def label(span: SpanView) -> str:
    """What a person needs from one span, on one line."""
    attrs = {key: _text(value) for key, value in span.attributes.items()}
    parts = [span.name]
    service = span.service_name
    if isinstance(span.attributes.get(names.TASK_INDEX), int):
        parts.append(f"#{attrs[names.TASK_INDEX]}")
        if names.TASK_OUTCOME in attrs:
            parts.append(f"outcome={attrs[names.TASK_OUTCOME]}")
        if names.AGENT in attrs:
            parts.append(f"({attrs[names.AGENT]})")
        if names.PROFILE in attrs:
            parts.append(f"profile={attrs[names.PROFILE]}")
        if names.SESSION_INDEX in attrs:
            parts.append(f"session={attrs[names.SESSION_INDEX]}")
    elif _is_proxy(span):
        parts.append("proxy")
        faults = proxy_faults(span)
        if faults:
            parts.append("fault=" + ",".join(f"{t}/{m}" for t, m in faults))
        if names.CLIENT_RECEIVED in attrs:
            parts.append(f"received={attrs[names.CLIENT_RECEIVED]}")
    elif span.kind is SpanKind.SERVER:
        parts.append("mock" if service == names.MOCK_SERVICE else "server")
        for event in span.events:
            if event.name == names.EVENT_STATE_CHANGE:
                state = {k.removeprefix(_STATE_PREFIX): _text(v) for k, v in event.attributes.items()}
                parts.append("state_change {" + ", ".join(f"{k}={v}" for k, v in state.items()) + "}")
    else:
        parts.append(span.kind.name)
        if names.ATTEMPT in attrs:
            parts.append(f"attempt={attrs[names.ATTEMPT]}")
        backoff = span.attributes.get(names.BACKOFF_S)
        if isinstance(backoff, float) and backoff > 0:
            parts.append(f"backoff_s={backoff:.3f}")
        if names.FAILURE in attrs:
            parts.append(f"failure={attrs[names.FAILURE]}")
    parts.append(f"{1000 * span.duration_s:.1f} ms")
    parts.extend(_links(span))
    if span.status_code.name == "ERROR" and span.status_message:
        parts.append(f"error: {span.status_message}")
    return "  ".join(parts)


def _links(span: SpanView) -> list[str]:
    """Where the span's links lead: a task's to its session's trace, a session's to its tasks' traces."""
    roles = [_text(link.attributes.get(names.LINK_ROLE, "")) for link in span.links]
    if roles == [names.LINK_SESSION]:
        return [f"session trace {span.links[0].trace_id}"]
    tasks = roles.count(names.LINK_TASK)
    others = len(roles) - tasks
    return ([f"links to {tasks} task trace(s)"] if tasks else []) + ([f"{others} other link(s)"] if others else [])


def _is_proxy(span: SpanView) -> bool:
    # The proxy's spans say what the client received; its service name can be renamed (OTEL_SERVICE_NAME).
    return names.CLIENT_RECEIVED in span.attributes


def _text(value: object) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)
