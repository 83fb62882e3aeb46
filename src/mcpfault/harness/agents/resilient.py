"""The ``resilient`` agent: ``RetryOnly``'s retries, and everything a careful call boundary adds.

Validation against the tool's outputSchema (and of a resource's JSON contents), a freshness check on
``as_of`` (of tool answers and resources alike), schema reconciliation, idempotency keys on
non-idempotent writes, retrying a write only when that is safe, a circuit breaker, a per-session retry
budget, and verification: a value a read answers is compared with a second source that also says it,
and a disagreement read again (``verify``, harness/agents/verify.py). Each mechanism can be switched
off by name (``resilient-no-freshness``, ``resilient-no-verify``, ...) to show what it buys.

It spends the task's deadline: its backoff is bounded by the deadline rather than by an attempt count,
its breaker's open state lasts a time and a caller waits for the half-open probe when its deadline
allows, and it fails at once when waiting could only end past the deadline.

Only ``resilient`` knows HTTP: it waits what ``Retry-After`` says instead of its backoff, starts a new
session after a 404 for its session (2025-11-25), and re-issues a request whose stream was cut (every
attempt has a new id); the write rule holds there too, so a non-idempotent write goes again only with
its idempotency key.
"""

from __future__ import annotations

import random
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

import anyio

from mcpfault.errors import (
    CallError,
    ContractChanged,
    HttpStatusError,
    MalformedResponse,
    ProtocolError,
    SessionLost,
    StaleResult,
    ToolError,
    TransportFailure,
)
from mcpfault.harness.agents import schema, verify
from mcpfault.harness.agents.policies import (
    DEFAULT_TASK_DEADLINE_S,
    MIN_ATTEMPT_S,
    Clock,
    RetryOnly,
    Send,
    Sleep,
    TaskDeadlineExceeded,
)
from mcpfault.harness.agents.tasks import FIELDS_READ, TaskSpec
from mcpfault.harness.client import StdioClient
from mcpfault.protocol import jsonrpc

MECHANISMS = ("retries", "validation", "freshness", "reconcile", "idempotency", "breaker", "budget", "verify")


class CircuitOpen(CallError):
    failure = "circuit_open"


class BudgetExhausted(CallError):
    failure = "retry_budget"


@dataclass
class ToolInfo:
    name: str
    input_schema: dict[str, Any]
    output_schema: dict[str, Any] | None
    read_only: bool
    idempotent: bool

    @staticmethod
    def from_listing(tool: Mapping[str, Any]) -> ToolInfo:
        annotations = tool.get("annotations") or {}
        return ToolInfo(
            name=str(tool.get("name")),
            input_schema=dict(tool.get("inputSchema") or {}),
            output_schema=dict(tool["outputSchema"]) if isinstance(tool.get("outputSchema"), dict) else None,
            read_only=annotations.get("readOnlyHint") is True,  # spec defaults: not read-only, not idempotent
            idempotent=annotations.get("idempotentHint") is True,
        )

    def accepts(self, argument: str) -> bool:
        properties = self.input_schema.get("properties")
        return isinstance(properties, dict) and argument in properties


BreakerState = Literal["closed", "open", "half_open"]


@dataclass
class Breaker:
    """Closed, open, half-open; the open state lasts ``open_s`` seconds of the clock it is given.

    Closed: every attempt goes through; ``threshold`` consecutive failures open it. Open: no attempt
    is sent for ``open_s`` seconds; ``wait_s()`` says how long is left, and the caller decides whether
    to wait for the probe (its task's deadline allows) or to fail now with circuit_open. Then it turns
    half-open: exactly one attempt, the probe, goes through; its success closes the breaker, its
    failure opens it again for another ``open_s``.

    Why a time and a caller that waits: an outage lasts a time, and a breaker's point is to leave the
    server alone for a while. A breaker that refuses without waiting lets how fast refused tasks fail
    decide how many fail (after a 10-request outage a 0.5 s cooldown refused 15 tasks in 12.5 ms
    without one request); one whose callers wait for the probe, within their deadline, fails only
    the tasks whose deadline comes before the server is back.
    """

    clock: Clock = time.monotonic
    threshold: int = 5
    # One bench second: resilience4j's default waitDurationInOpenState is 60 s, a bench minute.
    open_s: float = 1.0
    failures: int = 0  # consecutive, while closed
    opened_at: float = 0.0
    state: BreakerState = "closed"

    def wait_s(self) -> float:
        """Seconds before an attempt may be sent: 0 while closed or once the open state has lasted ``open_s``."""
        if self.state != "open":
            return 0.0
        return max(0.0, self.opened_at + self.open_s - self.clock())

    def check(self) -> None:
        """Before an attempt: raises CircuitOpen when it must not be sent now; the first one after the
        open state is over is the probe (half-open)."""
        if self.state == "open":
            left = self.wait_s()
            if left > 0:
                raise CircuitOpen(
                    f"circuit open after {self.failures} consecutive failures ({left:.3f}s before a probe may go)"
                )
            self.state = "half_open"

    def record(self, ok: bool) -> None:
        """After an attempt that was sent."""
        if ok:
            self.state, self.failures = "closed", 0
            return
        self.failures += 1
        if self.state == "half_open" or self.failures >= self.threshold:
            self.state, self.opened_at = "open", self.clock()


@dataclass
class Budget:
    """Retries allowed per session: a floor plus a share of the calls made."""

    floor: int = 20
    ratio: float = 0.5
    calls: int = 0
    retries: int = 0

    def spend(self) -> None:
        if self.retries >= self.floor + self.ratio * self.calls:
            raise BudgetExhausted(f"retry budget spent ({self.retries} retries for {self.calls} calls)")
        self.retries += 1


class Resilient(RetryOnly):
    """Retries bounded by the task's deadline: capped exponential backoff with full jitter, given up as
    soon as the next backoff would leave no time for an attempt; ``max_attempts`` only stops a call that
    fails instantly from spinning."""

    name = "resilient"
    max_attempts = 32
    # Capped at the per-call deadline (0.5 s: 30 s of production, the AWS SDKs' order of magnitude).
    max_backoff_s = 0.5
    max_retry_after_s = 30.0  # a longer Retry-After ends the call: waiting that long is giving up
    max_handshakes = 4  # tries of a new session's initialize
    # After a disagreement, how often both sources are read again before the answer is refused.
    verify_rounds = 2

    def __init__(
        self,
        client: StdioClient,
        rng: random.Random,
        disabled: frozenset[str] = frozenset(),
        *,
        task_deadline_s: float = DEFAULT_TASK_DEADLINE_S,
        clock: Clock = time.monotonic,
        sleep: Sleep = anyio.sleep,
    ) -> None:
        super().__init__(client, rng, task_deadline_s=task_deadline_s, clock=clock, sleep=sleep)
        self.enabled = frozenset(MECHANISMS) - disabled
        self.tools: dict[str, ToolInfo] = {}
        self.arg_renames: dict[str, dict[str, str]] = {}  # tool -> old argument name -> new
        self.field_renames: dict[str, dict[str, str]] = {}  # tool -> new field name -> the old one
        self.broken: dict[str, str] = {}  # tool -> how its contract changed
        self.max_as_of = 0
        self.breaker = Breaker(clock=clock)
        self.budget = Budget()
        self._keys = 0
        # This task's read answers by call (the second sources verification compares with), and the
        # highest attempt number sent per call, so a re-read goes as the call's next attempt.
        self._answers: dict[tuple[str, str], Any] = {}
        self._tries: dict[tuple[str, str], int] = {}
        if disabled:
            self.name = "resilient-" + "-".join(f"no-{m}" for m in sorted(disabled))

    async def start(self) -> None:
        await self._refresh_tools()

    def begin_task(self, spec: TaskSpec) -> None:
        super().begin_task(spec)
        self._answers.clear()
        self._tries.clear()

    async def call(self, tool: str, arguments: Mapping[str, Any]) -> Any:
        self.stats.calls += 1
        self.budget.calls += 1
        if self.client.tools_changed and "reconcile" in self.enabled:
            await self._refresh_tools()
        info = self.tools.get(tool)
        args = dict(arguments)
        if self._wants_key(info, args):
            self._keys += 1
            assert self.task is not None
            args["idempotency_key"] = f"{self.task.tag}-{self._keys}"
        safe = info is not None and (info.read_only or info.idempotent or "idempotency_key" in args)

        async def reconciled(exc: ProtocolError, attempt: int, attempts: int) -> bool:
            renamed = exc.code == jsonrpc.INVALID_PARAMS and "reconcile" in self.enabled and attempt < attempts - 1
            return renamed and await self._reconcile_input(tool)

        result = await self._guarded(
            lambda n, slept: self._attempt(tool, self._renamed_args(tool, args), n, slept), safe, reconciled
        )
        if info is None or not info.read_only:
            self._answers.clear()  # a write (or a call we know nothing of) may change what earlier reads said
            return result
        if "verify" in self.enabled:
            result = await self._verified(tool, args, result)
        self._answers[verify.call_key(tool, args)] = result
        return result

    def _sent(self, tool: str, args: Mapping[str, Any]) -> int:
        """Attempts this task already sent for the call: verification's re-read goes on from there (the
        task code's own second call of the same read starts at 1 again, as it would without a fault)."""
        return self._tries.get(verify.call_key(tool, self._renamed_args(tool, args)), 0)

    async def _verified(self, tool: str, args: Mapping[str, Any], result: Any) -> Any:
        """``result``, once every second source that says the values the task reads agrees with it; after a
        disagreement both are read again (the call as its next attempt: the agent acted), and when they
        still disagree after ``verify_rounds`` the answer is refused (Inconsistent)."""
        reads = FIELDS_READ.get(self.task.workflow, {}).get(tool, frozenset()) if self.task is not None else None
        checks = verify.checks_for(tool, reads)
        for round_ in range(self.verify_rounds + 1):
            problems: list[str] = []
            for check in checks if isinstance(result, dict) else ():
                source = check.source(args, result)
                other = None if source is None else await self._source_answer(source, again=round_ > 0)
                if isinstance(other, dict):
                    problems += check.compare(result, other)
            if not problems:
                return result
            if round_ == self.verify_rounds:
                raise verify.Inconsistent(f"{tool}: {'; '.join(problems)}")
            result = await self._read_again(tool, args)
        raise AssertionError("unreachable")

    async def _source_answer(self, source: verify.Source, *, again: bool) -> Any:
        """The second source's answer: the one this task already read, else read now (when the check
        fetches); ``again``: read it afresh. None when it cannot be had (verifying is best effort)."""
        key = source.key
        if key in self._answers and not again:
            return self._answers[key]
        offered = source.uri is not None or source.tool in self.tools
        if not offered or (key not in self._answers and not source.fetch):
            return None
        self.stats.calls += 1
        self.budget.calls += 1
        try:
            if source.uri is not None:
                uri, sent = source.uri, self._tries.get(key, 0)
                self.stats.verify_reads += 1
                answer = await self._guarded(lambda n, slept: self._read_attempt(uri, n + sent, slept))
            else:
                answer = await self._read_again(source.tool, source.arguments)
        except TaskDeadlineExceeded:
            raise
        except CallError:
            return None  # the second source failed: the answer stands unchecked, as without verify
        self._answers[key] = answer
        return answer

    async def _read_again(self, tool: str, args: Mapping[str, Any]) -> Any:
        """One more read of a call for verification, numbered after the attempts the task already sent."""
        self.stats.verify_reads += 1
        sent = self._sent(tool, args)
        return await self._guarded(
            lambda n, slept: self._attempt(tool, self._renamed_args(tool, args), n + sent, slept)
        )

    async def backoff(self, attempt: int, exc: CallError | None = None) -> float:
        """The server's Retry-After when it gave one (429, 503), else the jittered backoff; either only
        when an attempt still fits in the task's deadline after it, else the failure ends the call now."""
        if isinstance(exc, HttpStatusError) and exc.retry_after_s is not None:
            if exc.retry_after_s > self.max_retry_after_s:
                raise exc from None  # sooner than the server allows would be refused; later is too late
            delay_s = exc.retry_after_s
        else:
            delay_s = self.rng.uniform(0.0, min(self.max_backoff_s, self.base_backoff_s * 2**attempt))
        if exc is not None and delay_s + MIN_ATTEMPT_S > self.remaining_s():
            raise exc  # sleeping would only spend the deadline: fail now, and fast
        await self.sleep(delay_s)
        return delay_s

    async def _wait_for_probe(self) -> float:
        """Before an attempt: while the breaker is open, wait for its half-open probe when the task's
        deadline leaves time for it, else fail now with circuit_open. Returns the seconds waited."""
        wait_s = self.breaker.wait_s()
        waited = 0.0
        if wait_s > 0 and wait_s + MIN_ATTEMPT_S <= self.remaining_s():
            await self.sleep(wait_s)
            waited = wait_s
        self.breaker.check()
        return waited

    async def _new_session(self) -> None:
        """After a 404 for the session: ``initialize`` again, as a 2025-11-25 client MUST (a handshake
        that meets a transient failure is tried again, a few times)."""
        reconnect = getattr(self.client, "reconnect", None)
        if reconnect is None:
            return
        for attempt in range(self.max_handshakes):
            try:
                await reconnect()
                return
            except TransportFailure as exc:
                if attempt == self.max_handshakes - 1:
                    raise
                await self.backoff(attempt, exc)

    async def read(self, uri: str) -> Any:
        self.stats.calls += 1
        self.budget.calls += 1
        return await self._guarded(lambda n, slept: self._read_attempt(uri, n, slept))

    async def prompt(self, name: str, arguments: Mapping[str, str]) -> str:
        self.stats.calls += 1
        self.budget.calls += 1
        answer: str = await self._guarded(
            lambda n, slept: self.client.get_prompt(
                name, arguments, deadline_s=self.call_deadline_s(), attempt=n, backoff_s=slept
            )
        )
        return answer

    async def _guarded(
        self,
        send: Send,
        safe: bool = True,
        reconciled: Callable[[ProtocolError, int, int], Awaitable[bool]] | None = None,
    ) -> Any:
        """One call behind the breaker, the retries and the budget. ``safe``: whether a failed attempt
        may be retried (reads are); ``reconciled``: whether a protocol error was a renamed argument
        now translated, so the same call goes again and it is not a retry of a failure."""
        attempts = self.max_attempts if "retries" in self.enabled else 1
        slept = 0.0
        for attempt in range(attempts):
            if "breaker" in self.enabled:
                slept += await self._wait_for_probe()  # recorded with the attempt, as its backoff is
            try:
                result = await send(attempt + 1, slept)
            except TaskDeadlineExceeded:
                raise  # the task's time is up, not the server's fault: the breaker does not count it
            except CallError as exc:
                if (
                    isinstance(exc, ProtocolError)
                    and reconciled is not None
                    and await reconciled(exc, attempt, attempts)
                ):
                    slept = 0.0
                    continue
                self.breaker.record(False)
                if isinstance(exc, SessionLost):
                    await self._new_session()
                if not self._may_retry(exc, safe, attempt, attempts):
                    raise
                failure = exc
            else:
                self.breaker.record(True)
                return result
            if "budget" in self.enabled:
                self.budget.spend()
            slept = await self.backoff(attempt, failure)
        raise AssertionError("unreachable")

    async def _read_attempt(self, uri: str, number: int, backoff_s: float) -> Any:
        key = ("resources/read", uri)
        self._tries[key] = max(self._tries.get(key, 0), number)
        content = await self.client.read_resource(
            uri, deadline_s=self.call_deadline_s(), attempt=number, backoff_s=backoff_s
        )
        # A resource has no outputSchema; the mock's contract is an object stamped with as_of, as its tools'.
        if "validation" in self.enabled and not (isinstance(content, dict) and isinstance(content.get("as_of"), int)):
            raise MalformedResponse("schema", f"{uri}: the contents are not a JSON object with an integer as_of")
        self._check_fresh(uri, content)
        return content

    def _check_fresh(self, what: str, result: Any) -> None:
        """Raise StaleResult for an answer older than one already seen (the freshness mechanism)."""
        if "freshness" in self.enabled and isinstance(result, dict) and isinstance(result.get("as_of"), int):
            if result["as_of"] < self.max_as_of:
                raise StaleResult(f"{what} answered as of revision {result['as_of']}, already saw {self.max_as_of}")
            self.max_as_of = result["as_of"]

    def _wants_key(self, info: ToolInfo | None, args: Mapping[str, Any]) -> bool:
        if "idempotency" not in self.enabled or info is None or info.idempotent or info.read_only:
            return False
        return info.accepts("idempotency_key") and "idempotency_key" not in args

    def _may_retry(self, exc: CallError, safe: bool, attempt: int, attempts: int) -> bool:
        if attempt >= attempts - 1 or isinstance(exc, ContractChanged):
            return False
        transient = self.retryable(exc) or isinstance(exc, StaleResult | ToolError)
        return transient and safe

    async def _attempt(self, tool: str, args: Mapping[str, Any], number: int, backoff_s: float) -> Any:
        key = verify.call_key(tool, args)
        self._tries[key] = max(self._tries.get(key, 0), number)
        result = await self.client.call_tool(
            tool, args, deadline_s=self.call_deadline_s(), attempt=number, backoff_s=backoff_s
        )
        renames = self.field_renames.get(tool)
        if renames:
            result = schema.rename_keys(result, renames)
        info = self.tools.get(tool)
        if "validation" in self.enabled and info is not None and info.output_schema is not None:
            problem = schema.validate(result, info.output_schema)
            if problem is not None and "reconcile" in self.enabled and await self._reconcile_output(tool):
                result = schema.rename_keys(result, self.field_renames.get(tool, {}))
                problem = schema.validate(result, info.output_schema)
            if problem is not None:
                raise MalformedResponse("schema", f"{tool} result does not match its outputSchema: {problem}")
        self._check_fresh(tool, result)
        return result

    def _renamed_args(self, tool: str, args: Mapping[str, Any]) -> dict[str, Any]:
        renames = self.arg_renames.get(tool)
        return {renames.get(k, k): v for k, v in args.items()} if renames else dict(args)

    async def _refresh_tools(self) -> None:
        """Re-read tools/list and learn, for every tool, the renames since the listing we had.

        The task code keeps the names it was written for: arguments are renamed on the way out,
        result fields back on the way in, and results are validated against the schema the code
        was written for. A tool whose change is not a clean rename is marked broken.
        """
        previous = self.tools
        fresh = {t.name: t for t in map(ToolInfo.from_listing, await self.client.list_tools())}
        if previous and "reconcile" in self.enabled:
            for name, new in fresh.items():
                old = previous.get(name)
                if old is not None:
                    fresh[name] = self._reconcile(old, new)
        self.tools = fresh

    def _reconcile(self, old: ToolInfo, new: ToolInfo) -> ToolInfo:
        try:
            arg_renames = schema.find_renames(old.input_schema, new.input_schema)
            field_renames = (
                schema.find_renames(old.output_schema, new.output_schema)
                if old.output_schema is not None and new.output_schema is not None
                else {}
            )
        except ContractChanged as exc:
            self.broken[new.name] = str(exc)
            return new
        if arg_renames:
            # Map the names the task code uses (the originals) to the newest ones.
            chain = self.arg_renames.get(new.name, {})
            merged = {orig: arg_renames.get(current, current) for orig, current in chain.items()}
            merged |= {k: v for k, v in arg_renames.items() if k not in chain.values()}
            self.arg_renames[new.name] = merged
        if field_renames:
            back = {new_name: old_name for old_name, new_name in field_renames.items()}
            self.field_renames[new.name] = self.field_renames.get(new.name, {}) | back
        return ToolInfo(new.name, new.input_schema, old.output_schema, new.read_only, new.idempotent)

    async def _reconcile_input(self, tool: str) -> bool:
        """After -32602: did the tool's arguments get renamed? True when there is something new to try."""
        before = dict(self.arg_renames.get(tool, {}))
        await self._refresh_tools()
        self._check_contract(tool)
        return self.arg_renames.get(tool, {}) != before

    async def _reconcile_output(self, tool: str) -> bool:
        """A result broke the schema we know: True when the tool's fields turned out to be renamed."""
        before = dict(self.field_renames.get(tool, {}))
        await self._refresh_tools()
        self._check_contract(tool)
        return self.field_renames.get(tool, {}) != before

    def _check_contract(self, tool: str) -> None:
        if tool not in self.tools:
            raise ContractChanged(f"tool {tool!r} is no longer listed")
        if tool in self.broken:
            raise ContractChanged(f"tool {tool!r} changed in a way that is not a clean rename: {self.broken[tool]}")
