"""A run's or a benchmark's judged tasks as Prometheus metrics, pushed to a Pushgateway.

A run ends before any scrape could reach it, so its metrics go to a Pushgateway (Prometheus then
scrapes that with ``honor_labels: true``). They are computed from the judged ``TaskRecord`` s, the
same data as ``records.jsonl`` and ``report.md``, so a dashboard and the report always agree.

Series (names in ``telemetry.names``):

- ``mcpfault_task_outcomes_total{profile, agent, outcome}``: one per task.
- ``mcpfault_task_recovery_seconds{fault_type}``: one observation per recovered task, labelled with
  the first fault that touched it (the one that started the recovery clock), with the task's trace
  id as exemplar when known.
- ``mcpfault_task_retries_total``, ``mcpfault_duplicates_total``, ``mcpfault_silent_failures_total``
  ``{profile, agent}``.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from mcpfault.analysis.records import TaskRecord
from mcpfault.loopback import check_http_url, hide_credentials
from mcpfault.telemetry import names
from mcpfault.telemetry.metrics import HarnessMetrics

# (profile, agent, session, task_index): a task's identity in a benchmark, as in TaskRecord.
TaskKey = tuple[str, str, int, int, int]  # profile, agent, trial, session, task index

DEFAULT_JOB = "mcpfault_bench"


def check_pushgateway_url(url: str) -> str:
    """``url`` if a push could use it, else ``ValueError``: call it before a run, not after."""
    check_http_url(url, "Pushgateway URL", "e.g. http://127.0.0.1:9091")
    return url


def trace_ids_of(records: Iterable[TaskRecord]) -> dict[TaskKey, str]:
    """Each task's trace id, for exemplars."""
    return {task_key(r): r.trace_id for r in records if r.trace_id}


def task_key(record: TaskRecord) -> TaskKey:
    return (record.profile, record.agent, record.trial, record.session, record.task_index)


def record_bench_metrics(
    records: Iterable[TaskRecord],
    metrics: HarnessMetrics,
    *,
    trace_ids: Mapping[TaskKey, str] | None = None,
) -> None:
    """Add ``records`` to ``metrics``: outcomes, recovery times, retries, duplicates, silent failures.

    ``trace_ids`` maps ``task_key(record)`` to the hex trace id of that task's trace, used as the
    exemplar on its outcome and recovery time. Every (profile, agent) cell gets its counters even
    at zero, so a dashboard shows "0 retries" rather than "no data".
    """
    ids = trace_ids or {}
    for record in records:
        trace_id = ids.get(task_key(record))
        metrics.record_outcome(record.profile, record.agent, record.outcome, trace_id)
        if record.recovery_s is not None and record.outcome == "recovered":
            # Under the fault that affected it (a recovered task has one), not one that only touched it.
            fault_type = record.affected_types[0] if record.affected_types else names.OTHER
            metrics.observe_recovery(fault_type, record.recovery_s, trace_id)
        metrics.add_retries(record.profile, record.agent, record.retries)
        metrics.add_duplicates(record.profile, record.agent, record.duplicates)
        if record.no_ground_truth is None:
            # Without ground truth (a server cassette) nobody knows whether a task failed silently: no count,
            # not even 0; its outcome above is "unjudged" or "failed_detected".
            metrics.add_silent_failures(record.profile, record.agent, 1 if record.outcome == "failed_silent" else 0)


def push_bench_metrics(
    records: Iterable[TaskRecord],
    url: str,
    *,
    job: str = DEFAULT_JOB,
    grouping: Mapping[str, str] | None = None,
    trace_ids: Mapping[TaskKey, str] | None = None,
    timeout_s: float = 10.0,
) -> None:
    """Build the metrics of ``records`` and push them to the Pushgateway at ``url``.

    The push replaces whatever the gateway held for ``job`` and ``grouping`` (give each run its own
    grouping, e.g. ``{"run": "<run dir name>"}``, to keep runs apart). Raises ``ValueError`` for a URL
    that is not http(s), and ``OSError`` (``urllib.error.URLError``) naming the gateway when it
    cannot be reached or refuses the push.
    """
    metrics = HarnessMetrics()
    record_bench_metrics(records, metrics, trace_ids=trace_ids)
    try:
        metrics.push(url, job, grouping, timeout_s=timeout_s)
    except OSError as exc:
        shown = hide_credentials(url)
        raise OSError(f"cannot push metrics to the Pushgateway at {shown}: {exc}; is it running there?") from exc


class LiveMetrics:
    """Task metrics on /metrics while a run or bench goes on, updated as each session is judged."""

    def __init__(self, metrics: HarnessMetrics | None = None, server: Any = None) -> None:
        self._metrics = metrics
        self._server = server

    @classmethod
    def start(cls, addr: str | None) -> LiveMetrics:
        if addr is None:
            return cls()
        from mcpfault.errors import UsageError
        from mcpfault.telemetry.metrics import start_metrics_server

        metrics = HarnessMetrics()
        token = os.environ.get("MCPFAULT_METRICS_TOKEN") or None
        try:
            server, _ = start_metrics_server(addr, metrics.registry, token=token)
        except (ValueError, OSError) as exc:
            raise UsageError(f"--metrics-addr {addr}: {exc}") from None
        return cls(metrics, server)

    @property
    def url(self) -> str | None:
        """Where /metrics is served (the real port when 0 was asked for), or None."""
        return self._server.url if self._server is not None else None

    def record(self, records: Sequence[TaskRecord]) -> None:
        if self._metrics is not None:
            record_bench_metrics(records, self._metrics, trace_ids=trace_ids_of(records))

    def close(self) -> None:
        if self._server is not None:
            self._server.shutdown()
