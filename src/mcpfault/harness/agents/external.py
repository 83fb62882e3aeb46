"""An external agent (``--agent cmd:NAME``): any program, one process per task, the ``MCPFAULT_*`` contract.

For each task the harness writes the task file, starts the command in its own process group with the
contract's environment, and waits for it to exit (at most ``--agent-timeout`` seconds). Then it ends
the whole group (SIGTERM, then SIGKILL), so nothing the agent started outlives its task, and reads
the answer file. The environment (README, "Your agent"):

- ``MCPFAULT_MCP_URL``: the session's MCP endpoint over Streamable HTTP (``gateway``), through the proxy;
- ``MCPFAULT_MCP_COMMAND``: a JSON argv, ``mcpfault connect URL``, for agents that speak only stdio;
- ``MCPFAULT_TASK``: a JSON file: task id, workflow, target, instruction, system prompt, answer schema;
- ``MCPFAULT_ANSWER``: where the agent writes ``{"status": "done" | "failed", "answer": {...}, "reason": "..."}``;
- ``TRACEPARENT``: the task span's W3C trace context;
- ``OTEL_EXPORTER_OTLP_ENDPOINT``: the harness's loopback OTLP/HTTP receiver (``telemetry.otlp_receiver``).

``done`` is judged like a built-in agent's answer; ``failed`` is a detected failure. No answer, a crash,
the timeout and an answer that breaks the schema are detected failures, each with its own class
(``FAILURE_CLASSES``), and the tail of the agent's stderr goes into the task's record.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shlex
import signal
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import anyio
import jsonschema

from mcpfault.analysis.records import TaskRecord
from mcpfault.app.argv import mcpfault_argv
from mcpfault.errors import CallError, UpstreamError, UsageError
from mcpfault.harness.agents.gateway import AgentGateway
from mcpfault.harness.agents.llm import prompts
from mcpfault.harness.agents.policies import TaskStats
from mcpfault.harness.agents.tasks import WORKFLOWS, TaskSpec
from mcpfault.harness.client import StdioClient
from mcpfault.telemetry.logging import redact_text

PREFIX: Final = "cmd:"
STDERR_TAIL_CHARS: Final = 2000
TERM_GRACE_S: Final = 2.0  # after SIGTERM, before SIGKILL
AGENT_DIR: Final = "agent"  # in the session directory: task files, answers, each task's stdout and stderr
CONTRACT_VERSION: Final = 1
# The harness's own trace context and exporter, if it has them: the agent's spans belong to the task instead.
_HARNESS_TELEMETRY: Final = (
    "TRACEPARENT",
    "TRACESTATE",
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
)


class AgentReportedFailure(CallError):
    """The agent wrote ``status: failed``: it knows it did not do the task."""

    failure = "agent_reported_failure"


class AgentNoAnswer(CallError):
    """The agent exited 0 and wrote no answer file."""

    failure = "agent_no_answer"


class AgentCrashed(CallError):
    """The agent exited non-zero (or was killed by a signal) and wrote no answer file."""

    failure = "agent_crashed"


class AgentTimeout(CallError):
    """The agent was still running when ``--agent-timeout`` ran out; its process group was ended."""

    failure = "agent_timeout"


class AnswerInvalid(CallError):
    """The answer file is not JSON, not the contract's shape, or its answer breaks the task's schema."""

    failure = "answer_invalid"


FAILURE_CLASSES: Final = tuple(
    c.failure for c in (AgentReportedFailure, AgentNoAnswer, AgentCrashed, AgentTimeout, AnswerInvalid)
)


@dataclass(frozen=True, slots=True)
class ExternalConfig:
    """An external agent: its name (``cmd:NAME``), its command line and how long a task may take."""

    name: str
    command: tuple[str, ...]
    timeout_s: float = 120.0

    @property
    def label(self) -> str:
        return PREFIX + self.name


def is_external(agent: str) -> bool:
    return agent.startswith(PREFIX)


def parse_agent_commands(options: Sequence[str], *, single: str | None = None) -> dict[str, tuple[str, ...]]:
    """``--agent-command`` values as NAME -> argv. ``single`` (``run``): the one agent a bare command is for."""
    commands: dict[str, tuple[str, ...]] = {}
    for option in options:
        name, sep, line = option.partition("=")
        if single is not None and (not sep or not _is_name(name)):
            name, line = single, option  # run: the whole value is the command line
        elif not sep or not _is_name(name):
            raise UsageError(
                f"--agent-command {option!r}: give NAME=COMMAND, the NAME of a cmd:NAME in --agents "
                '(e.g. --agent-command mine="python my_agent.py")'
            )
        try:
            argv = tuple(shlex.split(line))
        except ValueError as exc:
            raise UsageError(f"--agent-command {option!r}: not a command line ({exc})") from None
        if not argv:
            raise UsageError(f"--agent-command {option!r}: the command line is empty")
        if name in commands:
            raise UsageError(f"--agent-command: {name} is given twice; give each agent one command")
        commands[name] = argv
    return commands


def _is_name(text: str) -> bool:
    return bool(text) and all(c.isalnum() or c in "-_." for c in text)


def external_configs(
    agents: Sequence[str], commands: Mapping[str, tuple[str, ...]], timeout_s: float
) -> dict[str, ExternalConfig]:
    """``cmd:NAME`` -> its config for every external agent named; each needs a command, each command its agent."""
    if timeout_s <= 0:
        raise UsageError(f"--agent-timeout {timeout_s:g}: give seconds > 0")
    configs: dict[str, ExternalConfig] = {}
    for agent in agents:
        if not is_external(agent):
            continue
        name = agent.removeprefix(PREFIX)
        if not _is_name(name):
            raise UsageError(f"agent {agent!r}: NAME in cmd:NAME is letters, digits, '-', '_' and '.'")
        if name not in commands:
            raise UsageError(f'agent {agent!r} has no command: add --agent-command {name}="COMMAND LINE"')
        configs[agent] = ExternalConfig(name, commands[name], timeout_s)
    unused = sorted(set(commands) - {c.name for c in configs.values()})
    if unused:
        raise UsageError(f"--agent-command {', '.join(unused)}: no such cmd:NAME among the agents")
    return configs


def check_workflows(workflows: Sequence[str]) -> None:
    unsupported = [w for w in workflows if w not in WORKFLOWS]
    if unsupported:
        raise UsageError(
            f"workflow {', '.join(unsupported)}: an external agent gets the tool workflows only "
            f"({', '.join(WORKFLOWS)}), whose answers have a schema"
        )


def task_document(spec: TaskSpec) -> dict[str, Any]:
    """What ``MCPFAULT_TASK`` holds: everything the built-in LLM agent is told about the task."""
    return {
        "contract": CONTRACT_VERSION,
        "task_id": spec.tag,
        "index": spec.index,
        "workflow": spec.workflow,
        "target": spec.target,
        "instruction": prompts.task_prompt(spec),
        "system_prompt": prompts.system_prompt(hints=False, workflow=spec.workflow),
        "answer_schema": prompts.answer_schema(spec.workflow),
        "answer_tool": prompts.ANSWER_TOOL,
        "failure_tool": prompts.FAILURE_TOOL,
    }


def connect_command(url: str) -> list[str]:
    """``mcpfault connect URL`` as this interpreter runs it, so it works without the script on PATH."""
    return mcpfault_argv("connect", url)


class ExternalAgent:
    """Runs one process per task against the session's gateway; ``solve`` is the task's answer or a CallError."""

    def __init__(
        self,
        config: ExternalConfig,
        client: StdioClient,
        gateway: AgentGateway,
        out_dir: Path,
        *,
        traceparent: Any = None,
        otlp_endpoint: str | None = None,
    ) -> None:
        self.name = config.label
        self.config = config
        self.client = client
        self.gateway = gateway
        self.dir = out_dir / AGENT_DIR
        self.traceparent = traceparent  # () -> str | None: the current task span's traceparent
        self.otlp_endpoint = otlp_endpoint
        self.stats = TaskStats()
        self.stderr_tails: dict[int, str] = {}  # task index -> the tail of its stderr
        self.answers: dict[int, Any] = {}  # task index -> the answer file's content as the agent wrote it

    async def start(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)

    def begin_task(self, spec: TaskSpec) -> None:
        self.stats = TaskStats()
        self.client.current_task = spec.index
        self.gateway.begin_task()

    async def solve(self, spec: TaskSpec) -> Any:
        task_file = self.dir / f"task-{spec.index}.json"
        answer_file = self.dir / f"answer-{spec.index}.json"
        stderr_file = self.dir / f"task-{spec.index}.stderr"
        answer_file.unlink(missing_ok=True)
        task_file.write_text(json.dumps(task_document(spec), indent=2) + "\n", encoding="utf-8")
        env = self._environment(task_file, answer_file)
        try:
            with (
                stderr_file.open("wb") as stderr,
                (self.dir / f"task-{spec.index}.stdout").open("wb") as stdout,
            ):
                exit_code, timed_out = await self._run(env, stdout, stderr)
        finally:
            self.stats.calls = self.gateway.calls.calls
            self.stderr_tails[spec.index] = _tail(stderr_file)
        if self.gateway.broken is not None:
            raise UpstreamError(str(self.gateway.broken))
        if timed_out:
            raise AgentTimeout(f"{self.name}: still running after --agent-timeout {self.config.timeout_s:g}s; ended")
        if not answer_file.exists():
            if exit_code != 0:
                raise AgentCrashed(f"{self.name}: exited with {_exit_text(exit_code)} and wrote no answer")
            raise AgentNoAnswer(f"{self.name}: exited 0 and wrote no answer to MCPFAULT_ANSWER")
        return self._read_answer(spec, answer_file)

    def _environment(self, task_file: Path, answer_file: Path) -> dict[str, str]:
        env = dict(os.environ)
        for inherited in (
            "TRACEPARENT",
            "TRACESTATE",
            "OTEL_EXPORTER_OTLP_ENDPOINT",
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
        ):
            env.pop(inherited, None)  # the harness's own would put the agent's spans in the wrong place
        env["MCPFAULT_MCP_URL"] = self.gateway.url
        env["MCPFAULT_MCP_COMMAND"] = json.dumps(connect_command(self.gateway.url))
        env["MCPFAULT_TASK"] = str(task_file)
        env["MCPFAULT_ANSWER"] = str(answer_file)
        traceparent = self.traceparent() if callable(self.traceparent) else None
        if traceparent:
            env["TRACEPARENT"] = traceparent
        if self.otlp_endpoint is not None:
            env["OTEL_EXPORTER_OTLP_ENDPOINT"] = self.otlp_endpoint
            env.setdefault("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
        return env

    async def _run(self, env: dict[str, str], stdout: Any, stderr: Any) -> tuple[int | None, bool]:
        """Run the command to its end or the timeout; (exit code, timed out). The group never outlives it."""
        try:
            process = await anyio.open_process(
                list(self.config.command),
                stdin=subprocess.DEVNULL,
                stdout=stdout,
                stderr=stderr,
                env=env,
                start_new_session=True,  # its own process group: ended whole, whatever it started
            )
        except OSError as exc:
            raise AgentCrashed(f"{self.name}: cannot start {self.config.command[0]!r}: {exc}") from None
        group = process.pid
        timed_out = False
        try:
            with anyio.move_on_after(self.config.timeout_s) as scope:
                await process.wait()
            timed_out = scope.cancelled_caught
        finally:
            with anyio.CancelScope(shield=True):
                await _end_group(process, group)
        return process.returncode, timed_out

    def _read_answer(self, spec: TaskSpec, answer_file: Path) -> Any:
        try:
            document = json.loads(answer_file.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise AnswerInvalid(f"{self.name}: {answer_file.name} is not JSON ({exc})") from None
        self.answers[spec.index] = document
        if not isinstance(document, dict) or document.get("status") not in ("done", "failed"):
            raise AnswerInvalid(f'{self.name}: {answer_file.name} needs "status": "done" or "failed"')
        if document["status"] == "failed":
            reason = document.get("reason")
            raise AgentReportedFailure(f"{self.name} gave up: {reason if isinstance(reason, str) else '(no reason)'}")
        answer = document.get("answer")
        schema = prompts.answer_schema(spec.workflow)
        try:
            jsonschema.validate(answer, schema)
        except jsonschema.ValidationError as exc:
            where = "/".join(str(p) for p in exc.absolute_path) or "(the answer)"
            raise AnswerInvalid(f"{self.name}: answer at {where}: {exc.message}") from None
        assert isinstance(answer, dict)
        return prompts.to_task_answer(spec.workflow, answer)


async def _end_group(process: Any, group: int) -> None:
    """SIGTERM to the group, SIGKILL after the grace (or at once when the leader is gone), and reap the leader."""
    if process.returncode is None:
        _signal_group(group, signal.SIGTERM)
        with anyio.move_on_after(TERM_GRACE_S):
            await process.wait()
    _signal_group(group, signal.SIGKILL)  # what is left of the group: children the agent left behind
    if process.returncode is None:
        await process.wait()
    await process.aclose()


def _signal_group(group: int, signum: signal.Signals) -> None:
    try:
        os.killpg(group, signum)
    except (ProcessLookupError, PermissionError):
        pass


def _exit_text(code: int | None) -> str:
    if code is not None and code < 0:
        return f"signal {signal.Signals(-code).name}"
    return f"exit code {code}"


def _tail(path: Path) -> str:
    try:
        data = path.read_bytes()[-STDERR_TAIL_CHARS * 4 :]
    except OSError:
        return ""
    return redact_text(data.decode("utf-8", "replace")[-STDERR_TAIL_CHARS:])


async def start_external_agent(
    config: ExternalConfig,
    client: StdioClient,
    handshake: Mapping[str, Any],
    out_dir: Path,
    stack: contextlib.AsyncExitStack,
) -> ExternalAgent:
    """The session's external agent with its gateway and OTLP receiver listening; both close with ``stack``."""
    from mcpfault.harness.otlp_receiver import OtlpReceiver
    from mcpfault.harness.session import AGENT_SPANS

    gateway = AgentGateway(client, handshake, deadline_s=config.timeout_s)
    await gateway.start()
    stack.push_async_callback(gateway.close)
    receiver = OtlpReceiver(out_dir / AGENT_SPANS)
    await receiver.start()
    stack.push_async_callback(receiver.close)
    return ExternalAgent(
        config,
        client,
        gateway,
        out_dir,
        traceparent=lambda: _traceparent(client.span_parent),
        otlp_endpoint=receiver.endpoint,
    )


def _traceparent(context: Any) -> str | None:
    """The W3C ``traceparent`` of ``context``'s span (the task's), as OpenTelemetry's env carrier holds it."""
    if context is None:
        return None
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    carrier: dict[str, str] = {}
    TraceContextTextMapPropagator().inject(carrier, context=context)
    return carrier.get("traceparent")


def with_agent_account(record: TaskRecord, agent: Any) -> TaskRecord:
    """The record with what the external agent said (its answer file's answer) and its stderr's tail."""
    if not isinstance(agent, ExternalAgent):
        return record
    document = agent.answers.get(record.task_index)
    answer = document.get("answer") if isinstance(document, dict) else document
    return dataclasses.replace(record, answer=answer, agent_stderr=agent.stderr_tails.get(record.task_index))
