"""Probes: small callables of one signature, ``(spec, window) -> value``, each measuring one figure.

A value of None means "nothing to measure" (no request in the window, Prometheus had no series, the
command timed out): it never satisfies a hypothesis, and it never fires a stop condition.
"""

from __future__ import annotations

import json
import subprocess
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from mcpfault.analysis.records import TaskRecord
from mcpfault.experiments.plan import ProbeSpec
from mcpfault.protocol.jsonlines import read_jsonl
from mcpfault.telemetry.names import Received

SUCCESS: frozenset[Received] = frozenset({"response"})  # what a client receiving an answer to its request got
TASK_SUCCESS = frozenset({"success", "recovered"})


@dataclass(frozen=True, slots=True)
class Window:
    """What a probe looks at: wall-clock seconds [start, end], the proxy's events, tasks judged so far."""

    start: float
    end: float
    events_path: Path
    # (when the task counts, record): a task counts in [start, end) (``place_tasks``)
    tasks: Sequence[tuple[float, TaskRecord]] = field(default=())


Probe = Callable[[ProbeSpec, Window], Any]


def requests_in(window: Window) -> list[dict[str, Any]]:
    """The proxy's request events that ended inside the window (control lines left out)."""
    found = []
    for record in read_jsonl(window.events_path):  # a line being written is skipped
        if not isinstance(record, dict) or "request_id" not in record:
            continue
        at = event_time(record)
        if window.start <= at <= window.end:
            found.append(record)
    return found


def place_tasks(
    finished: Sequence[tuple[float, TaskRecord]], method_start: float, method_end: float
) -> list[tuple[float, TaskRecord]]:
    """Each task (by the time it finished) at the time it counts for the phases: a task that ran into the
    method, even for a moment, counts during it (at the middle of its overlap); one over before the
    method started counts before, when it finished; one begun after the method ended counts after, when it
    began. So the "after" phase judges recovery, not the tail of a task the fault already met."""
    placed = []
    for at, record in finished:
        began = at - record.duration_s
        if at < method_start:
            when = at
        elif began >= method_end:
            when = began
        else:
            when = (max(began, method_start) + min(at, method_end)) / 2
        placed.append((when, record))
    return placed


def event_time(record: dict[str, Any]) -> float:
    return datetime.fromisoformat(str(record["time"])).timestamp()


def metric(spec: ProbeSpec, window: Window) -> Any:
    if spec.metric in ("task_success_rate", "silent_failure_rate"):
        outcomes = [r.outcome for at, r in window.tasks if window.start <= at < window.end]
        if not outcomes:
            return None
        wanted = TASK_SUCCESS if spec.metric == "task_success_rate" else frozenset({"failed_silent"})
        return round(sum(o in wanted for o in outcomes) / len(outcomes), 4)
    requests = requests_in(window)
    if spec.metric == "faults_injected":
        return sum(1 for r in requests if r.get("fault_type"))
    if spec.metric == "request_rate":
        return round(len(requests) / max(window.end - window.start, 1e-9), 3)
    if not requests:
        return None
    if spec.metric == "error_rate":
        return round(sum(r.get("client_received") not in SUCCESS for r in requests) / len(requests), 4)
    durations = sorted(float(r.get("duration_s", 0.0)) + float(r.get("delay_s", 0.0)) for r in requests)
    return round(durations[min(len(durations) - 1, int(0.95 * len(durations)))], 6)  # p95_duration_s


def promql(spec: ProbeSpec, window: Window) -> Any:
    assert spec.prometheus is not None and spec.query is not None
    query = urllib.parse.urlencode({"query": spec.query, "time": f"{window.end:.3f}"})
    url = f"{spec.prometheus.rstrip('/')}/api/v1/query?{query}"
    try:
        with urllib.request.urlopen(url, timeout=spec.timeout_s) as response:
            answer = json.loads(response.read())
    except (urllib.error.URLError, OSError, ValueError):
        return None
    result = answer.get("data", {}).get("result", [])
    if not result:
        return None
    value = result[0].get("value", [None, None])[1]
    try:
        return float(value)
    except (TypeError, ValueError):
        return value


def http(spec: ProbeSpec, _window: Window) -> Any:
    assert spec.url is not None
    try:
        with urllib.request.urlopen(spec.url, timeout=spec.timeout_s) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)
    except (urllib.error.URLError, OSError):
        return None


def command(spec: ProbeSpec, _window: Window) -> Any:
    try:
        done = subprocess.run(spec.command, capture_output=True, timeout=spec.timeout_s, check=False)
    except subprocess.TimeoutExpired:
        return None
    except OSError:
        return 127
    return done.returncode


PROBES: dict[str, Probe] = {"metric": metric, "promql": promql, "http": http, "command": command}


def measure(spec: ProbeSpec, window: Window) -> Any:
    return PROBES[spec.probe](spec, window)
