"""One session: a fresh proxy in front of a fresh mock server, an agent running tasks through it.

Tasks run one after another, so a session's request sequence (and with it every fault the seeded
engine injects) is the same on every run. After the session the harness joins what the client
sent with what the proxy recorded and judges every task against the world and the server's state.

Traced (the default), all three processes write spans into the session directory: the harness a
session span, a span per task and a CLIENT span per attempt (``client-spans.jsonl``), the proxy and
the mock server a SERVER span per request (``proxy-spans.jsonl``, ``server-spans.jsonl``). Each task is
the root of a trace of its own (its attempts, the proxy's and the server's spans under them, the llm
agent's model calls); the session span, in a trace of its own with the requests sent between tasks,
links to every task and each task back to it (span links), as OpenTelemetry models a batch and its
items. The judge reads which faults reached each task off its trace (``analysis.traces``); joining
attempts with the proxy's events by request id is its cross-check.
"""

from __future__ import annotations

import contextlib
import dataclasses
import random
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

import anyio
import anyio.to_thread
from opentelemetry.context import Context
from opentelemetry.trace import (
    Link,
    Span,
    SpanKind,
    Status,
    StatusCode,
    format_span_id,
    format_trace_id,
    set_span_in_context,
)

from mcpfault import __version__
from mcpfault.analysis import traces
from mcpfault.analysis.join import latency_pairs
from mcpfault.analysis.judge import TaskRun
from mcpfault.analysis.records import TaskRecord
from mcpfault.analysis.server import ServerAccount, account_of
from mcpfault.app import ready
from mcpfault.app.argv import mcpfault_argv
from mcpfault.errors import CallError, MCPFaultError, UpstreamError
from mcpfault.harness.agents.policies import DEFAULT_TASK_DEADLINE_S
from mcpfault.harness.agents.roster import make_agent
from mcpfault.harness.agents.tasks import TaskSpec, run_task
from mcpfault.harness.client import Era, StdioClient
from mcpfault.harness.forkserver import ForkServer
from mcpfault.harness.http_client import HttpClient, listen_command
from mcpfault.harness.session_judge import (
    SERVER_JOURNAL,
    STATE_FILE,
    SessionEvents,
    judge_session,
    write_jsonl,
    write_session_inputs,
)
from mcpfault.mock.world import World
from mcpfault.telemetry import names as span_names
from mcpfault.telemetry.names import TRANSPORT_HTTP, TRANSPORT_STDIO
from mcpfault.telemetry.tracing import SpanLink, SpanView, configure_tracing

if TYPE_CHECKING:
    from mcpfault.harness.agents.external import ExternalConfig
    from mcpfault.harness.agents.llm.agent import LLMConfig

# What naive task code raises when an answer is not what it was written for.
TASK_CRASHES = (KeyError, TypeError, ValueError, AttributeError, IndexError)
AGENT_SPANS = "agent-spans.jsonl"  # an external agent's own spans (harness.otlp_receiver writes them)
READY_FILE = ready.FILE_NAME  # where the session's proxy says it serves


@dataclass(frozen=True, slots=True)
class SessionPlan:
    profile: Path
    profile_name: str
    agent: str
    tasks: tuple[TaskSpec, ...]
    out_dir: Path
    world_seed: int = 0
    proxy_seed: int | None = None  # None: the profile's own seed
    session: int = 0
    trial: int = 0  # which of bench --trials K runs of its cell; written into every record
    deadline_s: float = 0.5
    task_deadline_s: float = (
        DEFAULT_TASK_DEADLINE_S  # the scripted agents' deadline per task (run/bench --task-deadline-s)
    )
    era: Era = "legacy"
    # How the agent reaches the proxy: "stdio" (its stdin/stdout) or "http" (the Streamable HTTP
    # bridge in front of the mock, `proxy --listen 127.0.0.1:0 -- SERVER`), in the plan's era.
    transport: str = "stdio"
    proxy_summary: bool = False  # the proxy's fault table, in proxy.log
    server_command: tuple[str, ...] | None = None  # None: the bundled mock server with world_seed
    traces: bool = True  # spans from all three processes into out_dir; the judge joins them
    otlp_endpoint: str | None = None  # also export every process's spans there over OTLP/HTTP
    llm: LLMConfig | None = None  # the llm agent's model variant (agent is then its label)
    external: ExternalConfig | None = None  # an external agent (cmd:NAME, agent is then its label)
    # For experiments: more proxy options (--control), a pause between tasks, and when to stop early.
    proxy_args: tuple[str, ...] = ()
    pace_s: float = 0.0
    stop_when: Callable[[], bool] | None = field(default=None, compare=False)
    # The proxy's --probe (ebpf, or fake:EVENTS.json): the probe's duplicate side effects must then agree
    # with the judge's duplicates, a cross-check of the probe's join (a disagreement breaks the session).
    probe: str | None = None
    # A recorded server (run/bench --server-cassette) in place of the mock: `mcpfault replay FILE` behind
    # the proxy. No world, no state: the judge takes the agent's claim (analysis.judge.judge_claim).
    server_cassette: Path | None = None


@dataclass(slots=True)
class SessionResult:
    plan: SessionPlan
    records: list[TaskRecord] = field(default_factory=list)
    runs: list[TaskRun] = field(default_factory=list)
    wall_s: float = 0.0
    error: str | None = None  # the session broke (server died, could not start): what and why
    latencies: list[tuple[float, float]] = field(default_factory=list)  # (client s, upstream s), unfaulted calls
    join_mismatches: list[str] = field(default_factory=list)  # tasks the trace and request-id joins disagree on
    trace_id: str | None = None  # the session span's trace (each task has its own), when traced
    server: ServerAccount | None = None  # the proxy's account of the server's crashes, restarts, downtime


def proxy_command(plan: SessionPlan) -> list[str]:
    python = sys.executable
    tracing: list[str] = []
    if plan.otlp_endpoint is not None:
        tracing = ["--otlp-endpoint", plan.otlp_endpoint]
    # `python -m mcpfault.mock` is `mcpfault mock-server` without the command-line tool's imports.
    server = [python, "-m", "mcpfault.mock", "--seed", str(plan.world_seed)]
    server += ["--state", str(plan.out_dir / STATE_FILE)]
    # Its writes survive a restart (crash_restart), and each is a file write the probe can see.
    server += ["--journal", str(plan.out_dir / SERVER_JOURNAL)]
    if plan.traces:
        server += ["--spans", str(plan.out_dir / traces.SERVER_SPANS), *tracing]
    if plan.server_cassette is not None:
        server = mcpfault_argv("replay", str(plan.server_cassette), python=python)
    if plan.server_command is not None:
        server = list(plan.server_command)
    proxy = mcpfault_argv("proxy", "--config", str(plan.profile), python=python)
    if not plan.proxy_summary:
        proxy.append("--no-summary")
    proxy += ["--events", str(plan.out_dir / "events.jsonl"), "--ready-file", str(plan.out_dir / READY_FILE)]
    if plan.traces:
        proxy += ["--spans", str(plan.out_dir / traces.PROXY_SPANS), *tracing]
    if plan.proxy_seed is not None:
        proxy += ["--seed", str(plan.proxy_seed)]
    if plan.probe is not None:
        proxy += ["--probe", plan.probe]
    return [*proxy, *plan.proxy_args, "--", *server]


class SessionTrace:
    """The harness's side of a session's traces: the session span and a span per task, each task the
    root of its own trace, linked both ways with the session span.

    Task spans stay open until the task is judged, so they carry its outcome; each ends at the time
    its task finished. Until then the judge sees them as ``open_tasks()``.
    """

    def __init__(self, plan: SessionPlan) -> None:
        provider = configure_tracing(
            span_names.HARNESS_SERVICE,
            spans_file=plan.out_dir / traces.CLIENT_SPANS,
            otlp_endpoint=plan.otlp_endpoint,
            max_links=max(128, len(plan.tasks)),  # the session span links to each of its tasks
        )
        assert provider is not None  # there is always the spans file to export to
        self.provider = provider
        self.tracer = provider.get_tracer(span_names.HARNESS_SCOPE, __version__)
        self._plan = plan
        self._session = self.tracer.start_span(
            span_names.SESSION_SPAN,
            attributes={
                span_names.PROFILE: plan.profile_name,
                span_names.AGENT: plan.agent,
                span_names.SESSION_INDEX: plan.session,
            },
        )
        self.context = set_span_in_context(self._session)
        self.trace_id = format_trace_id(self._session.get_span_context().trace_id)
        self._session.set_attribute(span_names.SESSION_ID, self.trace_id)
        self._tasks: dict[int, _OpenTask] = {}

    def start_task(self, spec: TaskSpec) -> Context:
        """Open the task's span; returns the context its attempts go in."""
        attributes: dict[str, Any] = {
            span_names.TASK_INDEX: spec.index,
            span_names.TASK_WORKFLOW: spec.workflow,
            span_names.TASK_TARGET: spec.target,
            span_names.TASK_TAG: spec.tag,
            span_names.PROFILE: self._plan.profile_name,
            span_names.AGENT: self._plan.agent,
            span_names.SESSION_INDEX: self._plan.session,
            span_names.SESSION_ID: self.trace_id,
        }
        started = time.time_ns()
        name = f"{span_names.TASK_SPAN} {spec.workflow}"
        # A root (an empty context as parent): one trace per task, so an exemplar or a trace search opens
        # the task alone; the links keep the way to its session and back.
        session = self._session.get_span_context()
        span = self.tracer.start_span(
            name,
            context=Context(),
            attributes=attributes,
            start_time=started,
            links=[Link(session, {span_names.LINK_ROLE: span_names.LINK_SESSION})],
        )
        self._session.add_link(span.get_span_context(), {span_names.LINK_ROLE: span_names.LINK_TASK})
        self._tasks[spec.index] = _OpenTask(span, name, attributes, started)
        return set_span_in_context(span)

    def task_finished(self, index: int) -> None:
        self._tasks[index].ended = time.time_ns()

    def open_tasks(self) -> list[SpanView]:
        """The finished tasks' spans as they will be written, outcome aside: what the trace join starts from."""
        session = self._session.get_span_context()
        to_session = SpanLink(
            format_trace_id(session.trace_id),
            format_span_id(session.span_id),
            {span_names.LINK_ROLE: span_names.LINK_SESSION},
        )
        views = []
        for task in self._tasks.values():
            if task.ended is None:
                continue
            context = task.span.get_span_context()
            views.append(
                SpanView(
                    trace_id=format_trace_id(context.trace_id),
                    span_id=format_span_id(context.span_id),
                    parent_span_id=None,  # each task is its trace's root
                    name=task.name,
                    kind=SpanKind.INTERNAL,
                    start_unix_nano=task.started,
                    end_unix_nano=task.ended,
                    attributes=dict(task.attributes),
                    links=(to_session,),
                )
            )
        return views

    async def flush(self) -> None:
        """Write the spans ended so far (the attempts'), without blocking the other sessions."""
        await anyio.to_thread.run_sync(self.provider.force_flush)

    async def close(self, records: Sequence[TaskRecord], error: str | None) -> None:
        """End every span, outcomes on the task spans, and flush them all.

        A failed task's span (and a broken session's) gets status ERROR, so a trace search for errors
        finds silent failures too, which no request-level span can show.
        """
        judged = {r.task_index: r for r in records}
        for index, task in self._tasks.items():
            record = judged.get(index)
            if record is not None:
                task.span.set_attribute(span_names.TASK_OUTCOME, record.outcome)
                if record.outcome in ("failed_detected", "failed_silent"):
                    task.span.set_status(Status(StatusCode.ERROR, record.detail or record.outcome))
            task.span.end(end_time=task.ended)  # None (a task cut short): now
        if error is not None:
            self._session.set_status(Status(StatusCode.ERROR, error))
        self._session.end()
        await anyio.to_thread.run_sync(self.provider.shutdown)


@dataclass(slots=True)
class _OpenTask:
    span: Span
    name: str
    attributes: dict[str, Any]
    started: int  # Unix ns
    ended: int | None = None


async def run_session(
    plan: SessionPlan,
    world: World,
    on_task_done: Callable[[], None] = lambda: None,
    launcher: ForkServer | None = None,
) -> SessionResult:
    """Run the plan's tasks through a fresh proxy and judge them; ``launcher`` forks the proxy (see forkserver)."""
    plan.out_dir.mkdir(parents=True, exist_ok=True)
    for name in (*traces.SPAN_FILES, SERVER_JOURNAL, AGENT_SPANS):
        (plan.out_dir / name).unlink(missing_ok=True)  # appended to (and replayed): a rerun starts afresh
    (plan.out_dir / STATE_FILE).unlink(missing_ok=True)  # an idle server writes its state only where none is
    result = SessionResult(plan)
    trace = SessionTrace(plan) if plan.traces else None
    try:
        await _run_tasks(plan, world, result, trace, on_task_done, launcher=launcher)
    finally:
        with anyio.CancelScope(shield=True):
            if trace is not None:
                result.trace_id = trace.trace_id
                await trace.close(result.records, result.error)
    return result


async def _run_tasks(
    plan: SessionPlan,
    world: World,
    result: SessionResult,
    trace: SessionTrace | None,
    on_task_done: Callable[[], None],
    *,
    launcher: ForkServer | None,
) -> None:
    started = time.monotonic()
    attempts: list[dict[str, Any]] = []
    usage: dict[int, Any] | None = None
    agent: Any = None
    log_path = plan.out_dir / "proxy.log"
    with log_path.open("wb") as proxy_log:
        tracer = trace.tracer if trace is not None else None
        client = _client_for(plan, log_path, proxy_log, tracer, launcher)
        client.span_parent = trace.context if trace is not None else None
        try:
            async with contextlib.AsyncExitStack() as stack, client:
                handshake = await client.connect(**_connect_deadline(plan))
                agent = await _make_agent(plan, client, trace, stack, handshake)
                usage = getattr(agent, "usage", None)  # the llm agent's token account, filled in as tasks run
                await agent.start()
                for spec in plan.tasks:
                    if plan.stop_when is not None and plan.stop_when():
                        break
                    if trace is not None:
                        client.span_parent = trace.start_task(spec)
                    result.runs.append(await _run_one(agent, client, spec))
                    if trace is not None:
                        trace.task_finished(spec.index)
                        client.span_parent = trace.context
                    on_task_done()
                    if plan.pace_s:
                        await anyio.sleep(plan.pace_s)
        except (UpstreamError, CallError) as exc:
            result.error = f"session {plan.session} of {plan.profile_name}/{plan.agent} broke: {exc}"
        finally:
            attempts = [
                {**a.as_record(), "started": a.started} for a in client.attempts if a.method in traces.TASK_METHODS
            ]
            write_jsonl(plan.out_dir / "attempts.jsonl", attempts)
            write_session_inputs(plan, result.runs)
    result.wall_s = time.monotonic() - started
    spans = None
    if trace is not None:
        await trace.flush()
        spans = traces.read_session_spans(plan.out_dir)
        spans = dataclasses.replace(spans, client=[*spans.client, *trace.open_tasks()])
    # Read once for the judge, the latencies and the server's account (each read parses the whole file).
    events = SessionEvents.read(plan.out_dir / "events.jsonl")
    _judge_into(result, world, attempts, spans, events, usage=usage, agent=agent)
    result.latencies = latency_pairs(attempts, events.requests)
    result.server = account_of(
        events.server,
        profile=plan.profile_name,
        agent=plan.agent,
        session=plan.session,
        trial=plan.trial,
    )


def _client_for(
    plan: SessionPlan, log_path: Path, proxy_log: IO[bytes], tracer: Any, launcher: ForkServer | None
) -> StdioClient:
    """The agent's MCP client: the proxy over stdio, or its HTTP bridge found by its readiness record."""
    if plan.transport == TRANSPORT_HTTP:
        return HttpClient(
            listen_command(proxy_command(plan)),
            ready_path=plan.out_dir / READY_FILE,
            log_path=log_path,
            deadline_s=plan.deadline_s,
            era=plan.era,
            stderr=proxy_log,
            tracer=tracer,
            launcher=launcher,
        )
    return StdioClient(
        proxy_command(plan),
        deadline_s=plan.deadline_s,
        era=plan.era,
        stderr=proxy_log,
        tracer=tracer,
        launcher=launcher,
    )


def _judge_into(
    result: SessionResult,
    world: World,
    attempts: list[dict[str, Any]],
    spans: traces.SessionSpans | None,
    events: SessionEvents,
    *,
    usage: dict[int, Any] | None,
    agent: Any,
) -> None:
    """Judge the session's runs into ``result.records``, each carrying the plan's trial, seed and transport
    (and the agent's account: its model usage, an external agent's stderr); what failed goes to ``error``."""
    plan = result.plan
    try:
        judged = judge_session(plan, world, result.runs, attempts, spans, events=events)
    except MCPFaultError as exc:
        # A session that broke first keeps its own reason: the missing state is a consequence of it.
        result.error = str(exc) if result.error is None else f"{result.error} (and nothing could be judged: {exc})"
        return
    result.records, result.join_mismatches = judged.records, judged.mismatches
    if usage is not None:
        result.records = [_with_usage(r, usage.get(r.task_index)) for r in result.records]
    if plan.external is not None and agent is not None:
        from mcpfault.harness.agents.external import with_agent_account

        result.records = [with_agent_account(r, agent) for r in result.records]
    if plan.trial:
        result.records = [dataclasses.replace(r, trial=plan.trial) for r in result.records]
    if plan.world_seed:
        result.records = [dataclasses.replace(r, seed=plan.world_seed) for r in result.records]
    if plan.transport != TRANSPORT_STDIO:
        result.records = [dataclasses.replace(r, transport=plan.transport) for r in result.records]
    if judged.mismatches and result.error is None:
        result.error = (
            f"session {plan.session} of {plan.profile_name}/{plan.agent}: the traces disagree with the proxy's "
            f"events, the server's state or the probe ({'; '.join(judged.mismatches[:3])}); see {plan.out_dir}"
        )


def _connect_deadline(plan: SessionPlan) -> dict[str, float]:
    """With --probe the proxy starts its sidecar, ready, before the server: bpftrace takes seconds to attach."""
    if plan.probe is None:
        return {}
    from mcpfault.probe.monitor import READY_TIMEOUT_S

    return {"deadline_s": READY_TIMEOUT_S + 15.0}


async def _make_agent(
    plan: SessionPlan,
    client: StdioClient,
    trace: SessionTrace | None,
    stack: contextlib.AsyncExitStack,
    handshake: dict[str, Any],
) -> Any:
    """The plan's agent: a scripted policy by name, the llm agent with its model backend, or an external one."""
    if plan.external is not None:
        from mcpfault.harness.agents.external import start_external_agent

        return await start_external_agent(plan.external, client, handshake, plan.out_dir, stack)
    if plan.llm is None:
        rng = random.Random(f"agent:{plan.world_seed}:{plan.session}")
        return make_agent(plan.agent, client, rng, task_deadline_s=plan.task_deadline_s)
    from mcpfault.harness.agents.llm.agent import LLMAgent, make_backend

    backend = await make_backend(plan.llm, profile=plan.profile_name, agent=plan.agent, session=plan.session)
    stack.push_async_callback(backend.aclose)
    return LLMAgent(client, backend, plan.llm, trace.tracer if trace is not None else None)


def _with_usage(record: TaskRecord, usage: Any) -> TaskRecord:
    """The record with the llm agent's token account for its task."""
    if usage is None:
        return record
    cost = usage.cost_usd
    return dataclasses.replace(
        record,
        model=usage.model,
        model_calls=usage.model_calls,
        input_tokens=usage.input_tokens,
        output_tokens=usage.output_tokens,
        cost_usd=None if cost is None else round(cost, 6),
    )


async def _run_one(agent: Any, client: StdioClient, spec: TaskSpec) -> TaskRun:
    agent.begin_task(spec)
    sent_before = sum(1 for a in client.attempts if a.method in traces.TASK_METHODS)
    started = time.monotonic()
    answer: Any = None
    failure: str | None = None
    detail = ""
    solve = getattr(agent, "solve", None)  # the llm agent solves from a prompt; scripted agents run the task code
    try:
        answer = await (solve(spec) if solve is not None else run_task(agent, spec))
    except CallError as exc:
        failure, detail = exc.failure, str(exc)
    except TASK_CRASHES as exc:
        failure, detail = "task_crashed", f"{type(exc).__name__}: {exc}"
    sent = sum(1 for a in client.attempts if a.method in traces.TASK_METHODS) - sent_before
    return TaskRun(
        index=spec.index,
        workflow=spec.workflow,
        target=spec.target,
        tag=spec.tag,
        started=started,
        finished=time.monotonic(),
        answer=answer,
        failure=failure,
        detail=detail,
        attempts=sent,
        calls=agent.stats.calls,
        verify_reads=agent.stats.verify_reads,
    )
