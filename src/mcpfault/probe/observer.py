"""The proxy's side of the probe: a request observer that marks each tools/call window and says what happened.

A begin mark is stamped when a tools/call is about to go upstream (``started``), an end mark when
its answer arrives or it is given up (``finished``); the probe's thread writes them to the sidecar.
Neither waits for the sidecar: each mark carries its moment on CLOCK_MONOTONIC, the clock of the
kernel's events, and the sidecar attributes events by it, so a slow or dead sidecar never holds a
call (monitor.py; a sidecar that does not read stamps still gets a waiting begin). The probe's own
thread then collects the window's events (calls that end within ``LINGER_S`` of each other
together, so the sidecar and the proxy's threads wake once for them rather than competing with each
next call), runs mcpfz_probe's policy over them and reports: span events and attributes (through
``annotate``, on the span writer's thread), a record in the events file, Prometheus counters, and the
per-tool table at exit.

The call id is the proxy's request key, made unique across sessions and reused ids:
``"<n>:<JSON-RPC id>"``, n counting the proxy's tool calls from 1.

Lost responses: when a fault lost a call's answer (a drop, a reset after the server acted, the
server's exit or restart, an answer so late the client cancelled, or one corrupted past reading),
``mcpfault.server.acted`` says whether the window saw the server act. When the client
then sends the same tool with the same arguments and the server acts again, that call carries a
``mcpfault.duplicate_side_effect`` event: a silent duplicate, seen on any server.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import queue
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, TextIO

import structlog
from mcpfz_probe import RuntimeEvent, evaluate_events

from mcpfault.faults.base import Call
from mcpfault.faults.engine import Decision
from mcpfault.probe import protocol
from mcpfault.probe.monitor import ProbeMonitor
from mcpfault.proxy.core import Finished
from mcpfault.proxy.events import EventSink
from mcpfault.telemetry import names

log = structlog.get_logger("mcpfault.probe")

# What a client receives when it got no usable answer (lost on the way, cut, cut short by the server's
# death or restart, so late that it gave up and cancelled, or unreadable): the server may have acted all
# the same, and a client that retries may make it act twice.
LOST = frozenset({"nothing", "reset", "stream_cut", "upstream_exited", "server_restarted", "cancelled", "malformed"})
FINDING_CATEGORIES = (
    "runtime.exec",
    "runtime.process_spawn",
    "runtime.net_connect",
    "runtime.net_bind",
    "runtime.net_listen",
    "runtime.sensitive_read",
    "runtime.fs_write",
    "runtime.fs_delete",
    "runtime.fs_chmod",
    "runtime.fs_mkdir",
    "runtime.fs_rename",
    "runtime.fs_symlink",
    "runtime.fs_link",
    "runtime.ptrace",
)
# Endings before the server answered: it may not have read the request yet (one held while it restarts)
# and act after the window closed, so a window without side effects does not show that it did nothing.
UNANSWERED = frozenset({"cancelled"})
MAX_SPAN_EVENTS = 32  # per kind and span; the count attributes carry the full number
MAX_DETAIL = 200
ANNOTATE_WAIT_S = 8.0  # the span writer waits this long at most for a call's side effects
MAX_REMEMBERED_LOSSES = 1024
LINGER_S = 0.001  # the probe's thread waits this long for more ended calls to collect with one
MAX_BATCH = 64
_WRITE_FLAGS = ("O_WRONLY", "O_RDWR", "O_CREAT", "O_TRUNC", "O_APPEND")


@dataclass(frozen=True, slots=True)
class SideEffect:
    type: str
    detail: str
    ts_ns: int
    ambiguous: bool = False


@dataclass(frozen=True, slots=True)
class SideEffectFinding:
    category: str
    severity: str
    detail: str
    ts_ns: int
    ambiguous: bool = False


@dataclass(slots=True)
class CallReport:
    """What one tools/call window saw; complete once ``done`` is set."""

    call_id: str
    tool: str
    request_id: Any
    side_effects: list[SideEffect] = field(default_factory=list)
    findings: list[SideEffectFinding] = field(default_factory=list)
    acted: str | None = None  # "true"/"false"/"unknown", for a lost response only
    duplicate_of: str | None = None
    confirmed: bool = False  # the sidecar confirmed both ends of the window
    done: threading.Event = field(default_factory=threading.Event)


@dataclass(frozen=True, slots=True)
class _Window:
    call_id: str
    tool: str
    request_id: Any
    arguments: str  # canonical JSON of the arguments: what makes a repeat "the same call"
    opened: bool  # the begin mark went out (and, with a sidecar that does not read stamps, was confirmed)


@dataclass(slots=True)
class _ToolStats:
    calls: int = 0
    acting: int = 0
    side_effects: int = 0
    findings: Counter[tuple[str, str]] = field(default_factory=Counter)  # (category, severity)
    duplicates: int = 0


def is_side_effect(event: RuntimeEvent) -> bool:
    """Whether an event changed something (a read-only open did not; a sensitive one is a finding still)."""
    if event.type not in protocol.EVENT_TYPES:
        return False
    if event.type == "file_open":
        return any(flag in str(event.data.get("flags", "")) for flag in _WRITE_FLAGS)
    return True


def describe(event: RuntimeEvent) -> str:
    data = event.data
    text: str
    if event.type == "exec":
        text = " ".join(str(a) for a in data.get("argv") or [data.get("path", "?")])
    elif event.type == "connect":
        text = f"{data.get('proto', 'tcp')} {data.get('dst', '?')}"
    elif event.type == "file_open":
        text = f"{data.get('path', '?')} ({data.get('flags', '?')})"
    elif event.type == "chmod":
        text = f"{data.get('path', '?')} mode {data.get('mode', '?')}"
    elif event.type == "ptrace":
        text = f"request {data.get('request')} on pid {data.get('target_pid')}"
    elif event.type == "process_spawn":
        text = f"{data.get('syscall', 'fork')} by {data.get('comm', '?')}"
    elif event.type == "listen":
        text = f"fd {data.get('fd')} backlog {data.get('backlog')}"
    elif event.type == "bind":
        text = str(data.get("dst", "?"))
    else:
        text = str(data.get("path", "?"))
        if "from" in data:
            text = f"{data['from']} -> {text}"
    return text[:MAX_DETAIL]


class ProbeObserver:
    """A RequestObserver (proxy/core.py). Thread-safe: started/finished come from the proxy's threads."""

    def __init__(self, monitor: ProbeMonitor, policy: Any, *, events: EventSink | None = None) -> None:
        self._monitor = monitor
        self._policy = policy
        self._events = events
        self._events_lock = threading.Lock()
        self._metrics: Any = None
        self._numbers = itertools.count(1)
        self._lock = threading.Lock()
        self._open: set[str] = set()  # call ids begun and not yet reported
        self._ambiguous: dict[str, list[RuntimeEvent]] = defaultdict(list)
        self._reports: dict[int, CallReport] = {}  # id(Finished) -> report, for the span writer
        self._annotating = False
        self._losses: dict[tuple[str, str], str] = {}  # (tool, arguments) -> call id of a lost call that acted
        self._queue: queue.Queue[tuple[_Window, Finished, CallReport] | None] = queue.Queue()
        self._worker = threading.Thread(target=self._work, name="mcpfault-probe", daemon=True)
        self._worker.start()
        self.tools: dict[str, _ToolStats] = defaultdict(_ToolStats)
        self.ambient_side_effects = 0
        self.generation = 0

    # -- wiring --------------------------------------------------------------------------------

    def enable_annotations(self) -> None:
        """Spans are recorded: keep each call's report for ``annotate``."""
        self._annotating = True

    def attach_metrics(self, proxy_metrics: Any) -> None:
        """Count side effects, findings and duplicates in the proxy's /metrics registry."""
        from mcpfault.telemetry.metrics import SideEffectMetrics

        if proxy_metrics is not None:
            self._metrics = SideEffectMetrics(
                proxy_metrics.registry, types=protocol.EVENT_TYPES, categories=FINDING_CATEGORIES
            )

    def rescope(self, pgid: int, generation: int) -> bool:
        """Point the sidecar at the server's process group: at start, and after every restart."""
        self.generation = generation
        scoped = self._monitor.scope(pgid, generation)
        if not scoped:
            log.warning("the probe sidecar did not confirm the scope; side effects may be missed", pgid=pgid)
        return scoped

    def on_start(self, pid: int, pgid: int, generation: int) -> None:
        """The transports' start hook: (pid, pgid, generation) of each server start."""
        self.rescope(pgid, generation)

    # -- RequestObserver -----------------------------------------------------------------------

    def started(self, call: Call, decision: Decision, started: float, *, from_server: bool = False) -> Any:
        if from_server or call.method != "tools/call" or call.target is None:
            return None
        if not decision.contacts_upstream or (decision.process is not None and decision.process.before_request):
            return None  # answered by the proxy, or the server killed first: the server never sees this call
        call_id = f"{next(self._numbers)}:{call.request_id}"
        arguments = call.params.get("arguments")
        key = json.dumps(arguments, sort_keys=True, separators=(",", ":"), default=str)
        with self._lock:
            self._open.add(call_id)
        opened = self._monitor.begin(call_id, call.target)
        return _Window(call_id, call.target, call.request_id, key, opened)

    def propagate(self, token: Any, meta: dict[str, Any]) -> bool:
        return False

    def finished(self, token: Any, outcome: Finished) -> None:
        if not isinstance(token, _Window):
            return
        ended = self._monitor.mark_end(token.call_id)
        report = CallReport(token.call_id, token.tool, token.request_id, confirmed=token.opened and ended)
        if self._annotating:
            with self._lock:
                self._reports[id(outcome)] = report
        self._queue.put((token, outcome, report))

    def upstream_exited(self, exit_code: int) -> None:
        pass

    # -- what spans get --------------------------------------------------------------------------

    def annotate(self, outcome: Finished) -> tuple[dict[str, Any], list[Any]] | None:
        """Attributes and events for a tools/call span; waits (bounded) for the probe's report."""
        with self._lock:
            report = self._reports.pop(id(outcome), None)
        if report is None:
            return None
        if not report.done.wait(ANNOTATE_WAIT_S):
            return {names.PROBE_CALL_ID: report.call_id}, []
        attributes: dict[str, Any] = {
            names.PROBE_CALL_ID: report.call_id,
            names.SIDE_EFFECT_COUNT: len(report.side_effects),
            names.FINDING_COUNT: len(report.findings),
        }
        if report.acted is not None:
            attributes[names.SERVER_ACTED] = report.acted
        events: list[Any] = []
        for effect in report.side_effects[:MAX_SPAN_EVENTS]:
            details: dict[str, Any] = {names.SIDE_EFFECT_TYPE: effect.type, names.SIDE_EFFECT_DETAIL: effect.detail}
            if effect.ambiguous:
                details[names.SIDE_EFFECT_AMBIGUOUS] = True
            events.append((names.EVENT_SIDE_EFFECT, effect.ts_ns, details))
        for finding in report.findings[:MAX_SPAN_EVENTS]:
            details = {
                names.FINDING_CATEGORY: finding.category,
                names.FINDING_SEVERITY: finding.severity,
                names.FINDING_DETAIL: finding.detail,
            }
            if finding.ambiguous:
                details[names.SIDE_EFFECT_AMBIGUOUS] = True
            events.append((names.EVENT_FINDING, finding.ts_ns, details))
        if report.duplicate_of is not None:
            ts = report.side_effects[0].ts_ns if report.side_effects else time.time_ns()
            events.append(
                (names.EVENT_DUPLICATE_SIDE_EFFECT, ts, {names.DUPLICATE_ORIGINAL_CALL_ID: report.duplicate_of})
            )
        return attributes, events

    # -- the probe's thread --------------------------------------------------------------------

    def _work(self) -> None:
        stopping = False
        while not stopping and (item := self._queue.get()) is not None:
            batch = [item]
            # Calls that end within LINGER_S of each other are collected together: their marks leave in
            # one write and the sidecar answers them in one, so the proxy's threads and the sidecar wake
            # once for several calls instead of competing with each call's successor.
            deadline = time.monotonic() + LINGER_S
            while len(batch) < MAX_BATCH and (left := deadline - time.monotonic()) > 0:
                try:
                    more = self._queue.get(timeout=left)
                except queue.Empty:
                    break
                if more is None:
                    stopping = True
                    break
                batch.append(more)
            self._monitor.flush_marks()
            for window, outcome, report in batch:
                try:
                    self._report(window, outcome, report)
                except Exception:  # a bug of ours must not stop every later report
                    log.exception("reporting a call's side effects failed", call_id=window.call_id)
                finally:
                    report.done.set()

    def _report(self, window: _Window, outcome: Finished, report: CallReport) -> None:
        summary, confirmed = self._monitor.collect(window.call_id)
        report.confirmed = report.confirmed and confirmed and not summary.truncated
        for event in self._monitor.take_ambient():
            self._sort_ambient(event)
        with self._lock:
            self._open.discard(window.call_id)
            ambiguous = self._ambiguous.pop(window.call_id, [])
        exact = [_without_secrets(e) for e in summary.events]
        ambiguous = [_without_secrets(e) for e in ambiguous]
        report.side_effects = [_effect(e) for e in exact if is_side_effect(e)]
        report.side_effects += [_effect(e, ambiguous=True) for e in ambiguous if is_side_effect(e)]
        report.findings = [_finding(f) for f in evaluate_events(exact, self._policy)]
        report.findings += [_finding(f, ambiguous=True) for f in evaluate_events(ambiguous, self._policy)]
        acted_exactly = any(not e.ambiguous for e in report.side_effects)
        lost = outcome.upstream_contacted and outcome.received in LOST
        if lost:
            if acted_exactly:
                report.acted = "true"
            elif report.confirmed and not report.side_effects and outcome.received not in UNANSWERED:
                report.acted = "false"
            else:
                report.acted = "unknown"
        self._duplicates(window, report, lost=lost, acted=acted_exactly)
        self._publish(window, report)

    def _sort_ambient(self, event: RuntimeEvent) -> None:
        if event.data.get("ambiguous"):
            with self._lock:
                for candidate in event.data.get("candidates") or ():
                    if candidate in self._open:
                        self._ambiguous[candidate].append(event)
        elif is_side_effect(event) and event.bucket != protocol.BUCKET_STARTUP:
            self.ambient_side_effects += 1

    def _duplicates(self, window: _Window, report: CallReport, *, lost: bool, acted: bool) -> None:
        key = (window.tool, window.arguments)
        original = self._losses.get(key)
        if original is not None and acted:
            report.duplicate_of = original
        if lost and acted:
            if original is None:
                if len(self._losses) >= MAX_REMEMBERED_LOSSES:
                    self._losses.pop(next(iter(self._losses)))
                self._losses[key] = window.call_id
        elif original is not None and not lost:
            del self._losses[key]  # the client got an answer this time: later repeats are its own choice

    def _publish(self, window: _Window, report: CallReport) -> None:
        stats = self.tools[window.tool]
        stats.calls += 1
        stats.acting += bool(report.side_effects)
        stats.side_effects += len(report.side_effects)
        stats.findings.update((f.category, f.severity) for f in report.findings)
        stats.duplicates += report.duplicate_of is not None
        if self._metrics is not None:
            for effect in report.side_effects:
                self._metrics.side_effect(effect.type)
            for finding in report.findings:
                self._metrics.finding(finding.category, finding.severity)
            if report.duplicate_of is not None:
                self._metrics.duplicate_side_effect()
        if self._events is not None:
            record: dict[str, Any] = {
                "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime()) + "Z",
                "record": "side_effects",
                "request_id": report.request_id,
                "method": "tools/call",
                "tool": report.tool,
                "call_id": report.call_id,
                "probe_confirmed": report.confirmed,
                "side_effects": [_as_dict(e) for e in report.side_effects],
                "findings": [_as_dict(f) for f in report.findings],
            }
            if report.acted is not None:
                record["server_acted"] = report.acted
            if report.duplicate_of is not None:
                record["duplicate_of"] = report.duplicate_of
            with self._events_lock:
                self._events.write(record)

    # -- the end -------------------------------------------------------------------------------

    def drain(self) -> None:
        """Report every call still queued (to the events file and the spans); no report after this."""
        if self._worker.is_alive():
            self._queue.put(None)
            self._worker.join(timeout=30)

    def close(self) -> None:
        """Drain, then stop the sidecar."""
        self.drain()
        self._monitor.close()

    def render(self, out: TextIO) -> None:
        """The findings per tool, for the exit summary."""
        from rich.console import Console
        from rich.table import Table

        console = Console(file=out, width=None if out.isatty() else 110, highlight=False)
        table = Table(title="mcpfault: side effects per tool (probe)", title_justify="left")
        for column in ("tool", "calls", "acted", "side effects", "duplicates", "findings"):
            table.add_column(column, justify="left" if column in ("tool", "findings") else "right")
        for tool, stats in sorted(self.tools.items()):
            findings = ", ".join(
                f"{category.removeprefix('runtime.')} {count} ({severity})"
                for (category, severity), count in sorted(stats.findings.items())
            )
            table.add_row(
                tool,
                str(stats.calls),
                str(stats.acting),
                str(stats.side_effects),
                str(stats.duplicates),
                findings or "-",
            )
        if not self.tools:
            table.add_row("(no tool calls)", "0", "0", "0", "0", "-")
        console.print(table)
        if self.ambient_side_effects:
            console.print(f"side effects outside any tool call: {self.ambient_side_effects}")


def _without_secrets(event: RuntimeEvent) -> RuntimeEvent:
    """The event with its argv redacted: whichever sidecar sent it, no secret reaches a span or a record."""
    argv = event.data.get("argv")
    if event.type != "exec" or not isinstance(argv, list):
        return event
    return dataclasses.replace(event, data={**event.data, "argv": protocol.redact_argv(argv)})


def _effect(event: RuntimeEvent, *, ambiguous: bool = False) -> SideEffect:
    return SideEffect(event.type, describe(event), int(event.data.get("ts_ns") or time.time_ns()), ambiguous)


def _finding(draft: Any, *, ambiguous: bool = False) -> SideEffectFinding:
    event = draft.evidence.get("event") if isinstance(draft.evidence, dict) else None
    ts = event.get("ts_ns") if isinstance(event, dict) else None
    return SideEffectFinding(
        draft.category, draft.severity, str(draft.detail)[:MAX_DETAIL], int(ts or time.time_ns()), ambiguous
    )


def _as_dict(item: SideEffect | SideEffectFinding) -> dict[str, Any]:
    fields: Sequence[str] = ("type", "detail") if isinstance(item, SideEffect) else ("category", "severity", "detail")
    record = {name: getattr(item, name) for name in fields}
    if item.ambiguous:
        record["ambiguous"] = True
    return record
