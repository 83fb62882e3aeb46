"""How many MCP sessions can one ``mcpfault proxy --listen`` hold, and what does each cost?

One proxy (``mcpfault proxy --config profiles/baseline.toml --listen 127.0.0.1:0 --upstream URL``) in
front of ``benchmarks/http_echo_server.py``; every session is a client of its own on its own keep-alive
connection, speaking Streamable HTTP (2025-11-25: ``initialize``, ``notifications/initialized``,
``tools/call``, ``DELETE``; 2026-07-28: ``server/discover``, ``tools/call`` with ``_meta``, no session).
The clients are asyncio streams in this one process (on uvloop when it is installed). Phases:

1. **concurrent**: ``--sessions`` N sessions opened (``--open-concurrency`` at a time) and held open; then
   ``--bursts`` times every session makes one ``tools/call`` at once (all N in flight), and ``--lone-calls``
   sequential calls spread over the sessions (one in flight, N held open);
2. **GET streams** (2025-11-25 only: the 2026-07-28 era has none): ``--get-streams`` of the sessions open
   the GET SSE stream on a second connection and hold it, and every session makes one more call;
3. **churn**: the N sessions end (``DELETE``), then ``--churn`` M sessions are opened, called once and
   ended, ``--open-concurrency`` at a time, the proxy's memory read after each quarter.

Reported: the proxy's RSS (``/proc/PID/status``) and open file descriptors (``/proc/PID/fd``) at each
step, memory per session (RSS delta / N) and per GET stream, p50/p99 of a call, errors (count and the
first few), and the limits the proxy applies (read from its code: see ``LIMITS``). Every answer is
checked (status, id, the echoed text names the session). A warm-up of a few sessions runs before the
baseline is read, so start-up allocations do not count as a session's.

Run from the repository root::

    .venv/bin/python benchmarks/scale.py --sessions 50 --churn 50          # the tests' form
    .venv/bin/python benchmarks/scale.py --sessions 1000 --churn 1000 --markdown docs/results/scale.md
    .venv/bin/python benchmarks/scale.py --sessions 1000 --era modern --json /tmp/scale.json

Loopback only. Every request has a deadline (``--timeout``), the whole run another (``--max-seconds``),
and the proxy and the echo server (each in a process group of its own) are stopped by pid at the end,
on an error or Ctrl-C too.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime as dt
import json
import os
import resource
import signal
import sys
import tempfile
import time
import urllib.parse
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from common import (  # sibling modules: benchmarks/ is sys.path[0] when this runs as a script
    INITIALIZED,
    BenchError,
    block_markers,
    check_initialize,
    command_line,
    echo_body,
    format_markdown_table,
    format_text_table,
    initialize_params,
    is_echo_result,
    jsonrpc_request,
    load_average,
    machine,
    percentile,
)
from common import write_block as common_write_block
from http_overhead import ECHO_SERVER, Answer, Process, decode_message, http_request, parse_head

Era = Literal["legacy", "modern"]
MODERN_VERSION = "2026-07-28"
META_PROTOCOL_VERSION = "io.modelcontextprotocol/protocolVersion"
DEFAULT_PROFILE = "profiles/baseline.toml"
WARMUP_SESSIONS = 20
MAX_ERRORS_SHOWN = 5
# The proxy's own limits, as its code has them (src/mcpfault/proxy/): what a user running many sessions meets.
LIMITS = {
    "session_cap": "10,000 sessions kept at once (proxy/http/sessions.py MAX_SESSIONS); past it the least recently used"
    " session's engine is forgotten (its fault counters retired): its requests still pass, and it gets a fresh"
    " engine seeded from the profile if it returns, so `after`/`limit` count again from 0 for it",
    "idle_expiry": "no idle expiry of a session: one is forgotten only on DELETE, on the server's 404, or past the"
    " cap; an idle keep-alive client connection is closed after 75 s (proxy/http/server.py KEEPALIVE_S), the session"
    " survives it",
    "upstream_pool": "at most 256 connections to the upstream for requests (proxy/http/exchange.py"
    " Limits.max_connections, no flag): more requests in flight wait for one; a GET stream gets a"
    " connection of its own outside that limit, for its whole life",
}
FDS_PER_PROCESS_SLACK = 64  # the proxy's and our own files beside the connections: logs, pipes, the event loop


# --------------------------------------------------------------------------- the proxy's figures


def rss_kib(pid: int) -> int:
    """The resident set of process ``pid`` in KiB (``VmRSS``)."""
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        raise BenchError(f"the proxy (pid {pid}) is gone: it exited or was killed during the run") from None
    raise BenchError(f"no VmRSS in /proc/{pid}/status (not Linux?)")


def open_fds(pid: int) -> int:
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        raise BenchError(f"the proxy (pid {pid}) is gone: it exited or was killed during the run") from None


@dataclass
class Sample:
    """The proxy's memory and descriptors at one step of the run."""

    step: str
    rss_kib: int
    fds: int


# --------------------------------------------------------------------------- one client


@dataclass
class Endpoint:
    host: str
    port: int
    host_header: str
    path: str
    era: Era
    timeout: float


def modern_request(endpoint: Endpoint, msg_id: int, method: str, params: dict[str, Any], name: str = "") -> bytes:
    """A 2026-07-28 request: the protocol version in ``_meta`` and in the headers, which mirror the body."""
    body = jsonrpc_request(msg_id, method, {**params, "_meta": {META_PROTOCOL_VERSION: MODERN_VERSION}})
    head = (
        f"POST {endpoint.path} HTTP/1.1\r\nHost: {endpoint.host_header}\r\nContent-Type: application/json\r\n"
        f"Accept: application/json, text/event-stream\r\nMCP-Protocol-Version: {MODERN_VERSION}\r\n"
        f"Mcp-Method: {method}\r\n"
    )
    if name:
        head += f"Mcp-Name: {name}\r\n"
    return (head + f"Content-Length: {len(body)}\r\n\r\n").encode("latin-1") + body


async def read_answer(reader: asyncio.StreamReader) -> Answer:
    """One answer, framed by Content-Length (the proxy's JSON answers) or chunked (what it relays as it comes)."""
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError:
        raise BenchError("the proxy closed the connection") from None
    parsed = parse_head(head[:-4])
    if parsed.chunked:
        parts = []
        while size := int((await reader.readuntil(b"\r\n")).split(b";")[0], 16):
            parts.append((await reader.readexactly(size + 2))[:-2])
        while await reader.readuntil(b"\r\n") != b"\r\n":
            pass  # trailers, none expected, up to the blank line that ends the message
        body = b"".join(parts)
    elif parsed.length is not None:
        body = await reader.readexactly(parsed.length)
    else:
        raise BenchError(f"HTTP {parsed.status} without Content-Length or chunked framing")
    return Answer(parsed.status, parsed.content_type, parsed.session_id, body)


class Session:
    """One client: its own connection, its own session (2025-11-25) and a tag in every echoed text."""

    def __init__(self, number: int, endpoint: Endpoint) -> None:
        self.number = number
        self.endpoint = endpoint
        self.session_id: str | None = None
        self.next_id = 10
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._stream: asyncio.StreamWriter | None = None  # the GET stream's connection, while open

    @property
    def is_open(self) -> bool:
        return self._writer is not None

    async def _roundtrip(self, request: bytes) -> Answer:
        if self._reader is None or self._writer is None:
            raise BenchError("the session was closed after an earlier error")
        self._writer.write(request)
        return await asyncio.wait_for(read_answer(self._reader), self.endpoint.timeout)

    def _post(self, msg_id: int, method: str, params: dict[str, Any], name: str = "") -> bytes:
        if self.endpoint.era == "modern":
            return modern_request(self.endpoint, msg_id, method, params, name)
        body = echo_body(msg_id, params["arguments"]["text"]) if method == "tools/call" else None
        if body is None:
            body = jsonrpc_request(msg_id, method, params)
        return http_request(self.endpoint.host_header, self.endpoint.path, body, self.session_id)

    async def open(self) -> None:
        """Connect and complete the era's handshake, then one call (the session's engine is made on it)."""
        endpoint = self.endpoint
        try:
            self._reader, self._writer = await asyncio.wait_for(
                asyncio.open_connection(endpoint.host, endpoint.port), endpoint.timeout
            )
        except (OSError, TimeoutError) as exc:
            raise BenchError(f"cannot connect: {exc!r}") from None
        if endpoint.era == "modern":
            answer = await self._roundtrip(self._post(1, "server/discover", {}))
            result = self._result(answer, 1, "server/discover")
            if MODERN_VERSION not in result.get("supportedVersions", ()):
                raise BenchError(f"server/discover: {result!r:.300}")
        else:
            init = jsonrpc_request(1, "initialize", initialize_params(f"scale-{self.number}"))
            answer = await self._roundtrip(http_request(endpoint.host_header, endpoint.path, init, None))
            if not answer.session_id:
                raise BenchError(f"initialize: HTTP {answer.status} without an Mcp-Session-Id")
            self.session_id = answer.session_id
            check_initialize(self._result(answer, 1, "initialize"))
            notified = await self._roundtrip(
                http_request(endpoint.host_header, endpoint.path, INITIALIZED, self.session_id)
            )
            if notified.status != 202:
                raise BenchError(f"notifications/initialized: HTTP {notified.status}, expected 202")
        await self.call()

    def _result(self, answer: Answer, msg_id: int, method: str) -> dict[str, Any]:
        if answer.status != 200:
            raise BenchError(f"{method}: HTTP {answer.status}: {answer.body[:200]!r}")
        reply = decode_message(answer)
        if reply.get("id") != msg_id or not isinstance(reply.get("result"), dict):
            raise BenchError(f"{method}: expected the result for id {msg_id}, got {reply!r:.300}")
        result: dict[str, Any] = reply["result"]
        return result

    async def call(self) -> int:
        """One ``tools/call`` of echo, checked; returns its round trip in nanoseconds."""
        msg_id = self.next_id
        self.next_id += 1
        text = f"s{self.number}:{msg_id}"  # an answer meant for another session, or another call, cannot pass
        request = self._post(msg_id, "tools/call", {"name": "echo", "arguments": {"text": text}}, "echo")
        start = time.perf_counter_ns()
        answer = await self._roundtrip(request)
        elapsed = time.perf_counter_ns() - start
        if not is_echo_result(self._result(answer, msg_id, "tools/call"), text):
            raise BenchError(f"tools/call {msg_id}: wrong answer {answer.body[:200]!r}")
        return elapsed

    async def open_get_stream(self) -> None:
        """The 2025-11-25 GET stream on a second connection, held open once its first bytes arrived."""
        endpoint = self.endpoint
        reader, writer = await asyncio.wait_for(asyncio.open_connection(endpoint.host, endpoint.port), endpoint.timeout)
        self._stream = writer
        writer.write(
            (
                f"GET {endpoint.path} HTTP/1.1\r\nHost: {endpoint.host_header}\r\nAccept: text/event-stream\r\n"
                f"MCP-Protocol-Version: 2025-11-25\r\nMcp-Session-Id: {self.session_id}\r\n\r\n"
            ).encode("latin-1")
        )
        head = parse_head((await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), endpoint.timeout))[:-4])
        if head.status != 200 or not head.content_type.startswith("text/event-stream"):
            raise BenchError(f"GET stream: HTTP {head.status} {head.content_type!r}")
        # The echo server's first event is a comment; through a proxy that passed it on, it arrives here.
        await asyncio.wait_for(reader.readuntil(b"\n\n"), endpoint.timeout)

    async def close_get_stream(self) -> None:
        if self._stream is not None:
            self._stream.close()
            with contextlib.suppress(OSError):
                await self._stream.wait_closed()
            self._stream = None

    async def close(self, delete: bool) -> None:
        """End the session (``DELETE``, 2025-11-25) and close its connection."""
        if self._writer is None:
            return
        try:
            if delete and self.session_id is not None:
                answer = await self._roundtrip(
                    (
                        f"DELETE {self.endpoint.path} HTTP/1.1\r\nHost: {self.endpoint.host_header}\r\n"
                        f"MCP-Protocol-Version: 2025-11-25\r\nMcp-Session-Id: {self.session_id}\r\n\r\n"
                    ).encode("latin-1")
                )
                if answer.status != 200:
                    raise BenchError(f"DELETE: HTTP {answer.status}")
        finally:
            await self.close_get_stream()
            self._writer.close()
            with contextlib.suppress(OSError):
                await self._writer.wait_closed()
            self._writer = None


# --------------------------------------------------------------------------- the run


@dataclass
class Run:
    """What a run measured; ``as_json`` is the ``--json`` file."""

    args: argparse.Namespace
    proxy_pid: int = 0
    echo_pid: int = 0
    samples: list[Sample] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    errors_by_action: dict[str, int] = field(default_factory=dict)
    sessions_opened: int = 0
    get_streams_opened: int = 0
    churned: int = 0
    open_s: float = 0.0
    burst_ns: list[int] = field(default_factory=list)
    lone_ns: list[int] = field(default_factory=list)
    stream_burst_ns: list[int] = field(default_factory=list)
    load_at_start: str = ""
    load_at_end: str = ""

    def sample(self, step: str) -> Sample:
        taken = Sample(step, rss_kib(self.proxy_pid), open_fds(self.proxy_pid))
        self.samples.append(taken)
        print(f"{step}: proxy RSS {taken.rss_kib:,} KiB, {taken.fds} fds", file=sys.stderr)
        return taken

    def at(self, step: str) -> Sample:
        return next(s for s in self.samples if s.step == step)

    def as_json(self) -> dict[str, Any]:
        args = self.args
        base, held = self.at("baseline"), self.at("sessions open")
        figures: dict[str, Any] = {
            "era": args.era,
            "sessions": args.sessions,
            "sessions_opened": self.sessions_opened,
            "open_seconds": round(self.open_s, 2),
            "kib_per_session": round((held.rss_kib - base.rss_kib) / max(1, self.sessions_opened), 1),
            "kib_per_session_high_water": round(
                (self.at("after calls").rss_kib - base.rss_kib) / max(1, self.sessions_opened), 1
            ),
            "fds_per_session": round((held.fds - base.fds) / max(1, self.sessions_opened), 2),
            "burst": latency(self.burst_ns),
            "lone": latency(self.lone_ns),
            "get_streams": args.get_streams,
            "get_streams_opened": self.get_streams_opened,
            "churn": args.churn,
            "churned": self.churned,
            "churn_without_delete": args.churn_without_delete,
            "errors": len(self.errors),
            "errors_by_action": self.errors_by_action,
            "first_errors": self.errors[:MAX_ERRORS_SHOWN],
            "samples": [vars(s) for s in self.samples],
            "pids": {"proxy": self.proxy_pid, "echo_server": self.echo_pid},
            "limits": LIMITS,
            "load_average": {"start": self.load_at_start, "end": self.load_at_end},
            "machine": machine(),
            "command": command_line(),
        }
        if self.get_streams_opened:
            streams = self.at("GET streams open")
            figures["kib_per_get_stream"] = round((streams.rss_kib - held.rss_kib) / self.get_streams_opened, 1)
            figures["stream_burst"] = latency(self.stream_burst_ns)
        churn = [s for s in self.samples if s.step.startswith("churn ")]
        if churn:
            figures["churn_growth_kib"] = churn[-1].rss_kib - churn[0].rss_kib
        return figures


def latency(samples_ns: list[int]) -> dict[str, float]:
    if not samples_ns:
        return {"calls": 0}
    ordered = sorted(samples_ns)
    return {
        "calls": len(ordered),
        "p50_ms": round(percentile(ordered, 50) / 1e6, 2),
        "p99_ms": round(percentile(ordered, 99) / 1e6, 2),
    }


async def each(
    run: Run, sessions: list[Session], what: str, action: Callable[[Session], Awaitable[Any]], limit: int
) -> list[Session]:
    """``action`` on every session, at most ``limit`` at once; returns those it succeeded on (errors noted)."""
    gate = asyncio.Semaphore(limit)
    done: list[Session] = []

    async def one(session: Session) -> None:
        async with gate:
            try:
                await action(session)
            except (BenchError, OSError, TimeoutError, ValueError, asyncio.IncompleteReadError) as exc:
                run.errors.append(f"session {session.number}: {what}: {exc!r}")
                run.errors_by_action[what] = run.errors_by_action.get(what, 0) + 1
                await close_quietly(session)
            else:
                done.append(session)

    await asyncio.gather(*(one(s) for s in sessions))
    return sorted(done, key=lambda s: s.number)


async def close_quietly(session: Session) -> None:
    with contextlib.suppress(BenchError, OSError, TimeoutError, asyncio.IncompleteReadError):
        await session.close(delete=False)


async def timed_calls(run: Run, sessions: list[Session], out: list[int], limit: int) -> list[Session]:
    async def call(session: Session) -> None:
        out.append(await session.call())

    return await each(run, sessions, "tools/call", call, limit)


async def measure(run: Run, endpoint: Endpoint) -> None:
    args = run.args
    opening = args.open_concurrency
    warm = [Session(-1 - i, endpoint) for i in range(WARMUP_SESSIONS)]
    for session in await each(run, warm, "warm-up", Session.open, opening):
        await session.close(delete=True)
    run.sample("baseline")

    started = time.monotonic()
    sessions = await each(run, [Session(i, endpoint) for i in range(args.sessions)], "open", Session.open, opening)
    run.open_s = time.monotonic() - started
    run.sessions_opened = len(sessions)
    run.sample("sessions open")

    # GET streams before the bursts: on a heap not yet grown by N calls in flight, their cost shows.
    if endpoint.era == "legacy" and args.get_streams:
        streaming = await each(run, sessions[: args.get_streams], "GET stream", Session.open_get_stream, opening)
        run.get_streams_opened = len(streaming)
        sessions = [s for s in sessions if s.is_open]  # a failed stream closed its session
        run.sample("GET streams open")
        sessions = await timed_calls(run, sessions, run.stream_burst_ns, len(sessions) or 1)
        before_closing = open_fds(run.proxy_pid)
        await asyncio.gather(*(s.close_get_stream() for s in streaming))
        await settle(run, before_closing - 2 * len(streaming))  # each held a client and an upstream connection
        run.sample("GET streams closed")

    for burst in range(args.bursts):
        sessions = await timed_calls(run, sessions, run.burst_ns, len(sessions) or 1)
        print(f"burst {burst + 1}/{args.bursts}: {len(sessions)} calls at once", file=sys.stderr)
    for number in range(args.lone_calls):
        if not sessions:
            break
        session = sessions[number * 7919 % len(sessions)]  # spread over the sessions, old and new
        if not await timed_calls(run, [session], run.lone_ns, 1):
            sessions.remove(session)
    run.sample("after calls")

    await each(run, sessions, "DELETE", lambda s: s.close(delete=True), opening)
    await settle(run, run.at("baseline").fds)
    run.sample("sessions closed")

    quarters = [args.churn // 4 + (1 if q < args.churn % 4 else 0) for q in range(4)]
    number = args.sessions
    for index, size in enumerate(quarters):
        if not size:
            continue
        batch = [Session(number + i, endpoint) for i in range(size)]
        number += size

        async def churn(session: Session) -> None:
            await session.open()
            await session.close(delete=not args.churn_without_delete)

        run.churned += len(await each(run, batch, "churn", churn, opening))
        await settle(run, run.at("baseline").fds)
        run.sample(f"churn {index + 1}/4")


async def settle(run: Run, fds: int) -> None:
    """Closed connections leave the proxy as it reads their EOF: wait (up to 5 s) until its descriptors are
    back to ``fds``, so a sample does not catch them half-closed."""
    deadline = time.monotonic() + 5.0
    while open_fds(run.proxy_pid) > fds and time.monotonic() < deadline:
        await asyncio.sleep(0.05)


# --------------------------------------------------------------------------- processes and limits


def raise_fd_limit(needed: int) -> str | None:
    """Raise this process's soft ``ulimit -n`` (the children inherit it) to ``needed``, as far as the hard
    limit allows; a message saying what to do when that is not enough."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft >= needed:
        return None
    if hard != resource.RLIM_INFINITY and hard < needed:
        return (
            f"{needed:,} open files are needed (by this client and by the proxy, each), but `ulimit -n` is {soft:,}"
            f" and its hard limit {hard:,}: raise the hard limit (as root: `prlimit --pid $$ --nofile={needed}`, or"
            f" `nofile` in /etc/security/limits.conf, or LimitNOFILE= for a service), or run fewer --sessions"
        )
    resource.setrlimit(resource.RLIMIT_NOFILE, (needed, hard))
    print(f"raised the soft open-files limit from {soft:,} to {needed:,} (ulimit -n)", file=sys.stderr)
    return None


@contextlib.contextmanager
def started(name: str, command: list[str], timeout: float, log: Any) -> Iterator[tuple[Process, str]]:
    """A child that announces its URL, stopped (SIGTERM, then SIGKILL to its group) whatever happens."""
    process = Process(name, command, log)
    try:
        try:
            url = process.wait_for_url(timeout)
        except BenchError:
            print(f"--- output of {name} (tail) ---\n{process.output()}\n---", file=sys.stderr)
            raise
        yield process, url
    finally:
        process.stop(grace=5.0)


async def run_async(run: Run) -> None:
    args = run.args
    # SIGTERM cancels the run, which unwinds through the cleanup that stops the children (they run in
    # process groups of their own, which a signal to the benchmark does not reach).
    this = asyncio.current_task()
    assert this is not None
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, this.cancel)
    if args.uvloop:
        with contextlib.suppress(ImportError):
            import uvloop

            asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    echo = [sys.executable, str(ECHO_SERVER), "0", *(["--get-stream"] if args.era == "legacy" else [])]
    with (
        tempfile.TemporaryFile() as echo_log,
        tempfile.TemporaryFile() as proxy_log,
        started("echo-server", echo, args.timeout, echo_log) as (echo_server, upstream),
    ):
        run.echo_pid = echo_server.proc.pid
        proxy = [
            sys.executable,
            "-m",
            "mcpfault",
            "proxy",
            "--config",
            args.profile,
            "--no-summary",
            "--listen",
            "127.0.0.1:0",
            "--upstream",
            upstream,
        ]
        with started("proxy", proxy, args.timeout, proxy_log) as (proxy_process, url):
            run.proxy_pid = proxy_process.proc.pid
            parts = urllib.parse.urlsplit(url)
            path = parts.path if parts.path not in ("", "/") else urllib.parse.urlsplit(upstream).path
            assert parts.hostname is not None and parts.port is not None
            endpoint = Endpoint(parts.hostname, parts.port, parts.netloc, path, args.era, args.timeout)
            await measure(run, endpoint)


# --------------------------------------------------------------------------- report


def report_rows(figures: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    def lat(name: str) -> str:
        found = figures.get(name) or {}
        if not found.get("calls"):
            return "n/a"
        return f"{found['p50_ms']:g} / {found['p99_ms']:g} ({found['calls']:,} calls)"

    rows = [
        ["era", figures["era"]],
        ["sessions held at once", f"{figures['sessions_opened']:,} of {figures['sessions']:,}"],
        ["time to open them", f"{figures['open_seconds']:g} s"],
        ["proxy memory per session", f"{figures['kib_per_session']:g} KiB"],
        ["proxy RSS high water per session, after the calls", f"{figures['kib_per_session_high_water']:g} KiB"],
        ["proxy fds per session", f"{figures['fds_per_session']:g}"],
        ["tools/call p50 / p99 ms, all sessions at once", lat("burst")],
        ["tools/call p50 / p99 ms, one at a time, all open", lat("lone")],
    ]
    if figures.get("get_streams_opened"):
        rows += [
            ["GET streams held", f"{figures['get_streams_opened']:,}"],
            ["proxy memory per GET stream", f"{figures['kib_per_get_stream']:g} KiB"],
            ["tools/call p50 / p99 ms, all at once, streams open", lat("stream_burst")],
        ]
    if figures.get("churned"):
        rows += [
            [
                "sessions opened and closed (churn)" + (", never ended" if figures["churn_without_delete"] else ""),
                f"{figures['churned']:,} of {figures['churn']:,}",
            ],
            ["proxy RSS growth, churn quarter 1 to 4", f"{figures['churn_growth_kib']:+,} KiB"],
        ]
    by_action = ", ".join(f"{what} {count:,}" for what, count in figures["errors_by_action"].items())
    rows.append(["errors", f"{figures['errors']:,}" + (f" ({by_action})" if by_action else "")])
    return ["figure", "value"], rows


def sample_rows(figures: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    return ["step", "proxy RSS KiB", "proxy fds"], [
        [s["step"], f"{s['rss_kib']:,}", str(s["fds"])] for s in figures["samples"]
    ]


def markdown_block(figures: dict[str, Any], when: dt.datetime) -> str:
    key = block_key(figures)
    begin, end = block_markers(f"scale:{key}")
    lines = [
        begin,
        "",
        f"### {figures['sessions']:,} sessions ({figures['era']}), churn {figures['churn']:,}"
        + (" without DELETE" if figures["churn_without_delete"] else ""),
        "",
        f"- Date: {when:%Y-%m-%d %H:%M %Z}; machine: {figures['machine']}",
        f"- Load average (1, 5, 15 min) at start {figures['load_average']['start']}, at end"
        f" {figures['load_average']['end']}; the client, the proxy and the echo server share these CPUs",
        f"- Command: `{figures['command']}`",
        "",
        format_markdown_table(*report_rows(figures)),
        "",
        format_markdown_table(*sample_rows(figures)),
        "",
    ]
    if figures["first_errors"]:
        lines += ["First errors:", "", *[f"- `{e}`" for e in figures["first_errors"]], ""]
    lines.append(end)
    return "\n".join(lines)


def block_key(figures: dict[str, Any]) -> str:
    kept = "-without-delete" if figures["churn_without_delete"] else ""
    return f"{figures['era']}-{figures['sessions']}-{figures['churn']}{kept}"


def write_block(path: Path, key: str, block: str) -> None:
    """Replace this run's block of ``path`` (same era, sessions and churn), or append it; the rest stays."""
    if not path.exists():
        path.write_text("# Scale\n", encoding="utf-8")
    common_write_block(path, f"scale:{key}", block)


# --------------------------------------------------------------------------- main


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--sessions", type=int, default=1000, help="sessions held open at once (default 1000)")
    parser.add_argument("--churn", type=int, default=1000, help="sessions opened and closed after (default 1000)")
    parser.add_argument(
        "--era",
        choices=("legacy", "modern"),
        default="legacy",
        help="legacy: 2025-11-25 sessions;"
        " modern: 2026-07-28, stateless (a 'session' is a client on its connection) (default legacy)",
    )
    parser.add_argument(
        "--get-streams",
        type=int,
        help="sessions that also hold the GET stream (legacy only; default min(sessions, 200); each is one more"
        " connection into the proxy and one upstream)",
    )
    parser.add_argument(
        "--churn-without-delete",
        action="store_true",
        help="churned sessions just close their connection, as a client that never ends its session (the proxy"
        " keeps them up to its session cap)",
    )
    parser.add_argument("--bursts", type=int, default=3, help="times every session calls at once (default 3)")
    parser.add_argument("--lone-calls", type=int, default=200, help="sequential calls with all open (default 200)")
    parser.add_argument(
        "--open-concurrency", type=int, default=100, help="sessions opened (or closed) at once (default 100)"
    )
    parser.add_argument("--profile", default=DEFAULT_PROFILE, help=f"the proxy's profile (default {DEFAULT_PROFILE})")
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds any one answer may take (default 60)")
    parser.add_argument("--max-seconds", type=float, default=900.0, help="bound on the whole run (default 900)")
    parser.add_argument("--no-uvloop", dest="uvloop", action="store_false", help="the clients on asyncio's own loop")
    parser.add_argument("--json", metavar="OUT", help="write the figures as JSON to OUT")
    parser.add_argument("--markdown", metavar="FILE", help="write/replace this run's block of FILE (Markdown)")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.get_streams is None:
        args.get_streams = min(args.sessions, 200) if args.era == "legacy" else 0
    if min(args.sessions, args.open_concurrency) < 1 or min(args.churn, args.bursts, args.lone_calls) < 0:
        print("--sessions and --open-concurrency must be >= 1; --churn, --bursts, --lone-calls >= 0", file=sys.stderr)
        return 2
    if args.get_streams < 0 or args.get_streams > args.sessions:
        print(f"--get-streams must be between 0 and --sessions ({args.sessions})", file=sys.stderr)
        return 2
    if args.era == "modern" and args.get_streams:
        print("--get-streams: the 2026-07-28 era has no GET stream; leave it out with --era modern", file=sys.stderr)
        return 2
    profile = Path(args.profile)
    if not profile.is_file():
        print(f"profile {args.profile} not found (run from the repository root, or pass --profile)", file=sys.stderr)
        return 2
    args.profile = str(profile.resolve())
    # Each session is one connection on either side of the proxy's listener, a GET stream a second one.
    problem = raise_fd_limit(args.sessions + 2 * args.get_streams + 256 + FDS_PER_PROCESS_SLACK)
    if problem:
        print(problem, file=sys.stderr)
        return 2

    run = Run(args, load_at_start=load_average())
    when = dt.datetime.now(dt.UTC).astimezone()
    try:
        asyncio.run(asyncio.wait_for(run_async(run), args.max_seconds))
    except TimeoutError:
        print(f"\nthe run took longer than --max-seconds {args.max_seconds:g}: stopped", file=sys.stderr)
        return 1
    except BenchError as exc:
        print(f"\nbenchmark failed: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("\ninterrupted", file=sys.stderr)
        return 130
    except asyncio.CancelledError:
        print("\nstopped by SIGTERM", file=sys.stderr)
        return 143
    run.load_at_end = load_average()
    figures = {"date": when.isoformat(timespec="seconds"), **run.as_json()}
    print()
    print(format_text_table(*report_rows(figures)))
    print()
    print(format_text_table(*sample_rows(figures)))
    for error in figures["first_errors"]:
        print(f"error: {error}")
    print("\nthe proxy's limits (from its code):")
    for name, text in LIMITS.items():
        print(f"- {name}: {text}")
    print(f"\nmachine: {figures['machine']}; load average at start {run.load_at_start}, at end {run.load_at_end}")
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(figures, indent=2) + "\n", encoding="utf-8")
    if args.markdown:
        write_block(Path(args.markdown), block_key(figures), markdown_block(figures, when))
        print(f"updated the {block_key(figures)} block of {args.markdown}")
    return 0 if not figures["errors"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
