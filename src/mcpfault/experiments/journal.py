"""Every state transition of an experiment, written three ways at once.

- a line of ``journal.jsonl`` in the shape of AWS FIS's experiment log schema version 2:
  ``{"version": "2", "time", "type": "experiment-state-change" | "action-state-change",
  "data": {"experimentId", "actionId", "state", "reason"}}``;
- a span event: the experiment is a root span, each action a child span;
- a metric: ``mcpfault_experiment_state{state}`` (1 for the current state) and
  ``mcpfault_experiment_actions_total{state}``, written to ``metrics.prom`` at the end.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

from opentelemetry.trace import Span, Status, StatusCode, set_span_in_context
from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest

from mcpfault import __version__
from mcpfault.protocol.jsonlines import dumps_line
from mcpfault.telemetry import names
from mcpfault.telemetry.tracing import configure_tracing

EXPERIMENT_STATES = ("pending", "initiating", "running", "completed", "stopped", "failed")
ACTION_STATES = ("pending", "running", "completed", "stopped", "failed")
FINAL = frozenset({"completed", "stopped", "failed"})
JOURNAL = "journal.jsonl"
SPANS = "experiment-spans.jsonl"
METRICS = "metrics.prom"


class ExperimentJournal:
    def __init__(self, out_dir: Path, experiment_id: str, title: str) -> None:
        self.experiment_id = experiment_id
        self.entries: list[dict[str, Any]] = []
        self.state = "pending"
        self.action_states: dict[str, str] = {}
        self._out_dir = out_dir
        self._file: IO[str] = (out_dir / JOURNAL).open("w", encoding="utf-8")
        provider = configure_tracing(names.EXPERIMENT_SERVICE, spans_file=out_dir / SPANS)
        assert provider is not None  # there is always the spans file
        self._provider = provider
        self._tracer = provider.get_tracer(names.EXPERIMENT_SCOPE, __version__)
        attributes = {names.EXPERIMENT_ID: experiment_id, names.EXPERIMENT_TITLE: title}
        self._root = self._tracer.start_span(names.EXPERIMENT_SPAN, attributes=attributes)
        self._spans: dict[str, Span] = {}
        self._registry = CollectorRegistry()
        self._state_gauge = Gauge(
            names.EXPERIMENT_STATE,
            "The experiment's state: 1 for the current one.",
            names.EXPERIMENT_STATE_LABELS,
            registry=self._registry,
        )
        self._actions = Counter(
            names.EXPERIMENT_ACTIONS_TOTAL,
            "Action state transitions, by the state entered.",
            names.EXPERIMENT_ACTIONS_TOTAL_LABELS,
            registry=self._registry,
        )

    def experiment(self, state: str, reason: str) -> None:
        assert state in EXPERIMENT_STATES, state
        self.state = state
        self._write("experiment-state-change", "", state, reason)
        self._root.add_event(names.EVENT_EXPERIMENT_STATE, _event(state, reason))
        for known in EXPERIMENT_STATES:
            self._state_gauge.labels(known).set(1 if known == state else 0)
        if state == "failed":
            self._root.set_status(Status(StatusCode.ERROR, reason))

    def action(self, action_id: str, state: str, reason: str) -> None:
        assert state in ACTION_STATES, state
        self.action_states[action_id] = state
        self._write("action-state-change", action_id, state, reason)
        self._actions.labels(state).inc()
        span = self._spans.get(action_id)
        if span is None:
            span = self._spans[action_id] = self._tracer.start_span(
                names.EXPERIMENT_ACTION_SPAN,
                context=set_span_in_context(self._root),
                attributes={names.EXPERIMENT_ID: self.experiment_id, names.EXPERIMENT_ACTION_ID: action_id},
            )
        span.add_event(names.EVENT_EXPERIMENT_STATE, _event(state, reason))
        if state in FINAL:
            if state == "failed":
                span.set_status(Status(StatusCode.ERROR, reason))
            span.end()

    def close(self) -> None:
        for span in self._spans.values():
            if span.is_recording():
                span.end()
        self._root.end()
        self._provider.shutdown()
        self._file.close()
        (self._out_dir / METRICS).write_bytes(generate_latest(self._registry))

    def _write(self, kind: str, action_id: str, state: str, reason: str) -> None:
        entry = {
            "version": "2",
            "time": datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z"),
            "type": kind,
            "data": {"experimentId": self.experiment_id, "actionId": action_id, "state": state, "reason": reason},
        }
        self.entries.append(entry)
        self._file.write(dumps_line(entry) + "\n")
        self._file.flush()


def _event(state: str, reason: str) -> dict[str, str]:
    return {names.EXPERIMENT_STATE_ATTR: state, names.EXPERIMENT_REASON: reason}
