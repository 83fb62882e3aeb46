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

from opentelemetry.trace import SpanKind

from mcpfault.analysis.traces import proxy_faults
from mcpfault.telemetry import names
from mcpfault.telemetry.span_files import SpanView, find_span_files, read_spans

_STATE_PREFIX = "mcpfault.state."


@dataclass(slots=True)
class Node:
    span: SpanView
    children: list[Node] = field(default_factory=list)


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
    if span.status_code.name == "ERROR" and span.status_message:
        parts.append(f"error: {span.status_message}")
    return "  ".join(parts)


def _is_proxy(span: SpanView) -> bool:
    # The proxy's spans say what the client received; its service name can be renamed (OTEL_SERVICE_NAME).
    return names.CLIENT_RECEIVED in span.attributes


def _text(value: object) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)
