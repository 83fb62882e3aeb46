"""What does mcpfault cost over Streamable HTTP, next to talking to the server directly and to a minimal relay?

Configurations (each a path from the client to benchmarks/http_echo_server.py):

- ``direct``: the client talks to the echo server;
- ``relay``: through benchmarks/http_relay.py, the least a stdlib HTTP relay can do;
- ``relay-uvloop``: through ``http_relay.py --uvloop``, a minimal relay on asyncio streams and uvloop (the
  event loop the proxy runs on): the floor for a Python HTTP proxy, which issue 33's targets are taken against;
- ``mcpfault``: through ``mcpfault proxy --config profiles/baseline.toml --listen 127.0.0.1:0 --upstream URL``;
- ``mcpfault-spans`` (``--spans FILE``) and ``mcpfault-spans-metrics`` (plus ``--metrics-addr``);
- with ``--sse``, also ``direct-sse``, ``relay-sse`` and ``mcpfault-sse`` against the echo server in SSE mode.

For each one, with the 2025-11-25 handshake (``initialize``, an ``Mcp-Session-Id``) done first:

1. latency: ``--calls`` sequential ``tools/call`` echo round trips on one keep-alive connection, each
   timed on its own; p50, p90, p99 and what each adds over ``direct``;
2. throughput: ``--clients`` (8) concurrent clients, each with its own connection and session, each
   making ``--calls-per-client`` sequential calls; requests/s = all calls / wall time.

Rounds are interleaved (every configuration runs in every round, in rotating order, latency in
alternating blocks) so noise lands on all alike; figures are medians across rounds. Every answer
is checked (status, id, echoed text that names the client and the id), so a fast but wrong path
fails. The client is the same for every configuration: a small raw-socket HTTP/1.1 client
(keep-alive, TCP_NODELAY, Content-Length and chunked framing) in one thread per connection.

Run from the repository root::

    .venv/bin/python benchmarks/http_overhead.py                 # full run
    .venv/bin/python benchmarks/http_overhead.py --quick         # smoke run
    .venv/bin/python benchmarks/http_overhead.py --markdown docs/results/performance.md

Loopback only. Every read has a deadline and every process (and its process group) is stopped at
the end, so the run always stops on its own.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import math
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, NamedTuple

from common import (  # a sibling module: benchmarks/ is sys.path[0] when this runs as a script
    HTTP_BLOCK_BEGIN,
    HTTP_BLOCK_END,
    INITIALIZED,
    PROTOCOL_VERSION,
    BenchError,
    Config,
    RoundResult,
    Summary,
    blame,
    check_echo_tool,
    check_initialize,
    cpu_cell,
    cpu_ns,
    decode,
    display_path,
    echo_body,
    failure_status,
    fill_defaults,
    format_markdown_table,
    initialize_params,
    interrupt_on_sigterm,
    is_echo_result,
    jsonrpc_request,
    load_average,
    log_tail,
    parse_extra_config,
    print_results,
    resolve_profile,
    rotated,
    round_result,
    run_facts,
    select_configs,
    split,
    stop_group,
    write_figures,
    write_http_block,
)

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
ECHO_SERVER = HERE / "http_echo_server.py"
RELAY = HERE / "http_relay.py"
DEFAULT_PROFILE = "profiles/baseline.toml"
FULL = {"calls": 2000, "warmup": 200, "rounds": 5, "calls_per_client": 500}
QUICK = {"calls": 300, "warmup": 50, "rounds": 2, "calls_per_client": 100}
MAX_HEAD = 64 * 1024
ANNOUNCE = re.compile(r"(?:serving|listening on) (http://\S+)")
LATENCY_TARGET = 1.0  # mcpfault added p50 / relay added p50, at most (issue 18, against the stdlib relay)
THROUGHPUT_TARGET = 0.8  # mcpfault requests/s / direct requests/s, at least (issue 18)


# --------------------------------------------------------------------------- the client


class Answer(NamedTuple):
    status: int
    content_type: str
    session_id: str | None
    body: bytes


class Head(NamedTuple):
    status: int
    length: int | None  # Content-Length, when given
    chunked: bool
    content_type: str
    session_id: str | None


def parse_head(head: bytes) -> Head:
    """An answer's status line and the headers the benchmarks read (``head`` without the blank line)."""
    lines = head.decode("latin-1").split("\r\n")
    try:
        status = int(lines[0].split(" ", 2)[1])
    except (IndexError, ValueError):
        raise BenchError(f"not an HTTP status line: {lines[0][:200]!r}") from None
    length: int | None = None
    chunked = False
    content_type = ""
    session_id = None
    for line in lines[1:]:
        name, _, value = line.partition(":")
        name = name.strip().lower()
        if name == "content-length":
            length = int(value)
        elif name == "transfer-encoding":
            chunked = "chunked" in value.lower()
        elif name == "content-type":
            content_type = value.strip()
        elif name == "mcp-session-id":
            session_id = value.strip()
    return Head(status, length, chunked, content_type, session_id)


class Connection:
    """One keep-alive HTTP/1.1 connection: a request out in one ``sendall``, its answer read back.

    Deliberately thin (no header objects, no email parser) so the client adds little to the round
    trip; every ``recv`` has the timeout as its deadline.
    """

    def __init__(self, host: str, port: int, timeout: float) -> None:
        try:
            self.sock = socket.create_connection((host, port), timeout=timeout)
        except OSError as exc:
            raise BenchError(f"cannot connect to {host}:{port}: {exc}") from None
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.timeout = timeout
        self.buf = bytearray()

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()

    def _recv(self) -> None:
        try:
            data = self.sock.recv(65536)
        except TimeoutError:
            raise BenchError(f"no answer within {self.timeout:g} s") from None
        except OSError as exc:
            raise BenchError(f"connection failed: {exc}") from None
        if not data:
            raise BenchError("the server closed the connection")
        self.buf += data

    def roundtrip(self, request: bytes) -> Answer:
        try:
            self.sock.sendall(request)
        except OSError as exc:
            raise BenchError(f"cannot send: {exc}") from None
        return self.read_answer()

    def read_answer(self) -> Answer:
        buf = self.buf
        end = buf.find(b"\r\n\r\n")
        while end < 0:
            if len(buf) > MAX_HEAD:
                raise BenchError(f"answer head larger than {MAX_HEAD} bytes")
            self._recv()
            end = buf.find(b"\r\n\r\n")
        status, length, chunked, content_type, session_id = parse_head(bytes(buf[:end]))
        del buf[: end + 4]
        if chunked:
            body = self._read_chunked()
        elif length is not None:
            while len(buf) < length:
                self._recv()
            body = bytes(buf[:length])
            del buf[:length]
        elif status in (204, 304) or status < 200:
            body = b""
        else:
            raise BenchError(f"HTTP {status} without Content-Length or chunked framing: keep-alive is impossible")
        return Answer(status, content_type, session_id, body)

    def _read_chunked(self) -> bytes:
        buf = self.buf
        parts: list[bytes] = []
        while True:
            end = buf.find(b"\r\n")
            while end < 0:
                self._recv()
                end = buf.find(b"\r\n")
            try:
                size = int(bytes(buf[:end]).split(b";")[0], 16)
            except ValueError:
                raise BenchError(f"bad chunk size line {bytes(buf[:end])[:100]!r}") from None
            if size == 0:
                del buf[: end + 2]
                # Trailers (none expected), then the blank line that ends the message.
                while True:
                    line_end = buf.find(b"\r\n")
                    while line_end < 0:
                        self._recv()
                        line_end = buf.find(b"\r\n")
                    del buf[: line_end + 2]
                    if line_end == 0:
                        return b"".join(parts)
            while len(buf) < end + 2 + size + 2:
                self._recv()
            parts.append(bytes(buf[end + 2 : end + 2 + size]))
            del buf[: end + 2 + size + 2]


def http_request(host_header: str, path: str, body: bytes, session_id: str | None) -> bytes:
    head = (
        f"POST {path} HTTP/1.1\r\nHost: {host_header}\r\nContent-Type: application/json\r\n"
        f"Accept: application/json, text/event-stream\r\nMCP-Protocol-Version: {PROTOCOL_VERSION}\r\n"
    )
    if session_id is not None:
        head += f"Mcp-Session-Id: {session_id}\r\n"
    return (head + f"Content-Length: {len(body)}\r\n\r\n").encode("latin-1") + body


def decode_message(answer: Answer) -> dict[str, Any]:
    """The one JSON-RPC message of an answer, a JSON body or a one-event SSE stream."""
    if answer.content_type.startswith("text/event-stream"):
        data = [line[5:].lstrip() for line in answer.body.splitlines() if line.startswith(b"data:")]
        if len(data) != 1:
            raise BenchError(f"expected one SSE data line, got {answer.body[:300]!r}")
        raw = data[0]
    elif answer.content_type.startswith("application/json"):
        raw = answer.body
    else:
        raise BenchError(f"HTTP {answer.status} with Content-Type {answer.content_type!r}: {answer.body[:300]!r}")
    return decode(raw)


class McpClient:
    """One client: its own connection and its own 2025-11-25 session."""

    def __init__(self, url: str, timeout: float, tag: str) -> None:
        parts = urllib.parse.urlsplit(url)
        if parts.hostname is None or parts.port is None:
            raise BenchError(f"bad URL {url!r}")
        self.host_header = parts.netloc
        self.path = parts.path or "/"
        self.conn = Connection(parts.hostname, parts.port, timeout)
        self.session_id: str | None = None
        self.tag = tag  # in every echoed text: an answer meant for another client cannot pass
        self.next_id = 100

    def close(self) -> None:
        self.conn.close()

    def request(self, msg_id: int, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        answer = self.conn.roundtrip(
            http_request(self.host_header, self.path, jsonrpc_request(msg_id, method, params), self.session_id)
        )
        if answer.status != 200:
            raise BenchError(f"{method}: HTTP {answer.status}: {answer.body[:300]!r}")
        if method == "initialize":
            if not answer.session_id:
                raise BenchError("initialize: no Mcp-Session-Id in the answer")
            self.session_id = answer.session_id
        reply = decode_message(answer)
        if reply.get("id") != msg_id or "result" not in reply:
            raise BenchError(f"{method}: expected the result for id {msg_id}, got {reply!r:.300}")
        result: dict[str, Any] = reply["result"]
        return result

    def handshake(self) -> None:
        check_initialize(self.request(0, "initialize", initialize_params("mcpfault-http-bench")))
        answer = self.conn.roundtrip(http_request(self.host_header, self.path, INITIALIZED, self.session_id))
        if answer.status != 202:
            raise BenchError(f"notifications/initialized: expected HTTP 202, got {answer.status} {answer.body[:200]!r}")
        check_echo_tool(self.request(1, "tools/list"))

    def echo_requests(self, count: int, payload: str) -> tuple[range, list[bytes]]:
        # Ids never repeat on a client, so a late or duplicated answer cannot pass the checks.
        ids = range(self.next_id, self.next_id + count)
        self.next_id += count
        return ids, [
            http_request(self.host_header, self.path, echo_body(i, self.text(i, payload)), self.session_id) for i in ids
        ]

    def text(self, msg_id: int, payload: str) -> str:
        return f"{self.tag}:{msg_id}:{payload}"

    def calls(self, count: int, payload: str, timed: bool) -> list[int]:
        """Sequential echo round trips; per-call nanoseconds (empty when not ``timed``); all checked after."""
        ids, requests = self.echo_requests(count, payload)
        answers: list[Answer] = []
        samples: list[int] = []
        roundtrip, clock = self.conn.roundtrip, time.perf_counter_ns
        if timed:
            for request in requests:
                start = clock()
                answer = roundtrip(request)
                samples.append(clock() - start)
                answers.append(answer)
        else:
            answers = [roundtrip(request) for request in requests]
        self.check(answers, ids, payload)
        return samples

    def check(self, answers: Sequence[Answer], ids: Sequence[int], payload: str) -> None:
        for answer, msg_id in zip(answers, ids, strict=True):
            if answer.status != 200:
                raise BenchError(f"id {msg_id}: HTTP {answer.status}: {answer.body[:300]!r}")
            reply = decode_message(answer)
            if reply.get("id") != msg_id or not is_echo_result(reply.get("result"), self.text(msg_id, payload)):
                raise BenchError(f"id {msg_id}: wrong answer {json.dumps(reply)[:300]}")


# --------------------------------------------------------------------------- processes


@dataclass(frozen=True)
class HttpConfig(Config):
    """A front process to measure; its ``command`` is empty for ``direct``, and "{upstream}" and "{spans}" in it
    are filled in per round."""

    upstream: str = "json"  # which echo server: "json" or "sse"


class Process:
    """A child on 127.0.0.1 that announces its URL; stdout and stderr go to a temp file."""

    def __init__(self, name: str, command: Sequence[str], log: IO[bytes]) -> None:
        self.name = name
        self.log = log
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        try:
            self.proc = subprocess.Popen(
                list(command),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=ROOT,
                env=env,
                start_new_session=True,  # its own group, so the cleanup reaches anything it starts
            )
        except OSError as exc:
            raise BenchError(f"cannot start {shlex.join(command)}: {exc}", name) from None

    def wait_for_url(self, timeout: float) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = ANNOUNCE.search(self.output())
            if found:
                return found.group(1)
            if self.proc.poll() is not None:
                raise BenchError(f"exited with {self.proc.returncode} before listening", self.name)
            time.sleep(0.02)
        raise BenchError(f"did not announce its URL within {timeout:g} s", self.name)

    def output(self, limit: int = 4000) -> str:
        return log_tail(self.log, limit)

    def stop(self, grace: float) -> int | None:
        """SIGTERM, ``grace`` seconds to leave, then SIGKILL to the whole group."""
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.send_signal(signal.SIGTERM)
        return stop_group(self.proc, grace)


@contextlib.contextmanager
def started(
    name: str, command: Sequence[str], args: argparse.Namespace, exit_codes: list[int | None]
) -> Iterator[tuple[Process, str]]:
    with tempfile.TemporaryFile() as log:
        process = Process(name, command, log)
        try:
            with blame(name):
                url = process.wait_for_url(args.timeout)
            yield process, url
        except BaseException as exc:
            exit_codes.append(process.stop(grace=0.5))
            culprit = isinstance(exc, BenchError) and exc.config in (None, name)
            tail = process.output()
            if culprit and tail.strip():
                print(f"--- output of {name} (tail) ---\n{tail}\n---", file=sys.stderr)
            raise
        else:
            exit_codes.append(process.stop(args.grace))


def default_configs(profile: str, sse: bool) -> list[HttpConfig]:
    python = sys.executable
    proxy = (python, "-m", "mcpfault", "proxy", "--config", profile, "--no-summary", "--listen", "127.0.0.1:0")
    configs = [
        HttpConfig("direct", ()),
        HttpConfig("relay", (python, str(RELAY), "0", "{upstream}")),
        HttpConfig("relay-uvloop", (python, str(RELAY), "--uvloop", "0", "{upstream}")),
        HttpConfig("mcpfault", (*proxy, "--upstream", "{upstream}")),
        HttpConfig("mcpfault-spans", (*proxy, "--upstream", "{upstream}", "--spans", "{spans}")),
        HttpConfig(
            "mcpfault-spans-metrics",
            (*proxy, "--upstream", "{upstream}", "--spans", "{spans}", "--metrics-addr", "127.0.0.1:0"),
        ),
    ]
    if sse:
        configs += [
            HttpConfig("direct-sse", (), "sse"),
            HttpConfig("relay-sse", (python, str(RELAY), "0", "{upstream}"), "sse"),
            HttpConfig("mcpfault-sse", (*proxy, "--upstream", "{upstream}"), "sse"),
        ]
    return configs


def parse_http_config(spec: str) -> HttpConfig:
    """``--config NAME=COMMAND``; a NAME ending in -sse fronts the SSE echo server."""
    config = parse_extra_config(spec)
    return HttpConfig(config.name, config.command, "sse" if config.name.endswith("-sse") else "json")


# --------------------------------------------------------------------------- rounds


def concurrent_calls(clients: Sequence[McpClient], count: int, payload: str, timeout: float) -> int:
    """Every client makes ``count`` calls at once, one thread each; returns wall-clock nanoseconds."""
    go = threading.Event()
    failures: list[BaseException] = []
    finished: list[int] = []

    def work(client: McpClient) -> None:
        try:
            ids, requests = client.echo_requests(count, payload)
            go.wait(timeout)
            roundtrip = client.conn.roundtrip
            answers = [roundtrip(request) for request in requests]
            finished.append(time.perf_counter_ns())
            client.check(answers, ids, payload)
        except BaseException as exc:  # reported by the main thread
            failures.append(exc)

    threads = [threading.Thread(target=work, args=(c,), name=f"client-{c.tag}", daemon=True) for c in clients]
    for thread in threads:
        thread.start()
    time.sleep(0.01)  # let every thread build its requests and wait on the event
    start = time.perf_counter_ns()
    go.set()
    deadline = time.monotonic() + timeout + count * timeout
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))
    if failures:
        first = failures[0]
        raise first if isinstance(first, BenchError) else BenchError(f"a client failed: {first!r}")
    if any(thread.is_alive() for thread in threads) or len(finished) != len(clients):
        raise BenchError("a client did not finish in time")
    return max(finished) - start


def run_round(summaries: list[Summary[HttpConfig]], round_index: int, args: argparse.Namespace) -> list[RoundResult]:
    count = len(summaries)
    latency: list[list[int]] = [[] for _ in summaries]
    elapsed_ns = [0] * count
    server_codes: list[int | None] = []
    with contextlib.ExitStack() as stack:
        upstreams: dict[str, str] = {}
        server_pids: dict[str, int] = {}
        for kind in sorted({s.config.upstream for s in summaries}):
            command = [sys.executable, str(ECHO_SERVER), "0", *(["--sse"] if kind == "sse" else [])]
            server, upstreams[kind] = stack.enter_context(started(f"echo-server-{kind}", command, args, server_codes))
            server_pids[kind] = server.proc.pid
        urls: dict[int, str] = {}
        pids: dict[int, int] = {}  # the configuration's own process (none for direct)
        for index in rotated(count, round_index):
            config = summaries[index].config
            if not config.command:
                urls[index] = upstreams[config.upstream]
                continue
            spans = str(Path(args.workdir) / f"{config.name}-spans.jsonl")
            command = [
                part.replace("{upstream}", upstreams[config.upstream]).replace("{spans}", spans)
                for part in config.command
            ]
            process, url = stack.enter_context(started(config.name, command, args, summaries[index].exit_codes))
            pids[index] = process.proc.pid
            parts = urllib.parse.urlsplit(url)
            if parts.path in ("", "/"):  # a relay that keeps paths: the server's MCP path through it
                url = parts._replace(path=urllib.parse.urlsplit(upstreams[config.upstream]).path).geturl()
            urls[index] = url
        # One latency client and --clients throughput clients per configuration, all set up first.
        latency_clients: dict[int, McpClient] = {}
        crowd: dict[int, list[McpClient]] = {}
        for index in rotated(count, round_index):
            with blame(summaries[index].config.name):
                client = McpClient(urls[index], args.timeout, "L")
                stack.callback(client.close)
                client.handshake()
                client.calls(args.warmup, args.payload, timed=False)
                latency_clients[index] = client
                crowd[index] = []
                for number in range(args.clients):
                    member = McpClient(urls[index], args.timeout, f"C{number}")
                    stack.callback(member.close)
                    member.handshake()
                    member.calls(args.client_warmup, args.payload, timed=False)
                    crowd[index].append(member)
        for block, size in enumerate(split(args.calls, math.ceil(args.calls / args.block))):
            for index in rotated(count, round_index + block):
                with blame(summaries[index].config.name):
                    latency[index] += latency_clients[index].calls(size, args.payload, timed=True)
        # CPU during the throughput parts: the configuration's process, the echo server, our client threads.
        cpu = [[0.0, 0.0, 0.0] for _ in summaries]
        for part, size in enumerate(split(args.calls_per_client, args.throughput_parts)):
            for index in rotated(count, round_index + part):
                with blame(summaries[index].config.name):
                    watched = (pids.get(index), server_pids[summaries[index].config.upstream])
                    before = [cpu_ns(pid) if pid is not None else math.nan for pid in watched]
                    client_before = time.process_time_ns()
                    elapsed_ns[index] += concurrent_calls(crowd[index], size, args.payload, args.timeout)
                    cpu[index][2] += time.process_time_ns() - client_before
                    for slot, (pid, start) in enumerate(zip(watched, before, strict=True)):
                        cpu[index][slot] += (cpu_ns(pid) if pid is not None else math.nan) - start
    if any(code != 0 for code in server_codes):
        print(f"warning: echo server exit codes {server_codes}", file=sys.stderr)
    calls = args.clients * args.calls_per_client
    return [
        round_result(samples, calls, elapsed, used)
        for samples, elapsed, used in zip(latency, elapsed_ns, cpu, strict=True)
    ]


def run(configs: list[HttpConfig], args: argparse.Namespace) -> list[Summary[HttpConfig]]:
    summaries = [Summary(c) for c in configs]
    for round_index in range(args.rounds):
        results = run_round(summaries, round_index, args)
        progress = []
        for summary, result in zip(summaries, results, strict=True):
            summary.rounds.append(result)
            progress.append(
                f"{summary.config.name} p50 {result.p50_us:.0f} us p99 {result.p99_us:.0f} us"
                f" {result.rate_per_s:,.0f} req/s"
            )
        print(f"round {round_index + 1}/{args.rounds}: " + " | ".join(progress), file=sys.stderr)
    return summaries


# --------------------------------------------------------------------------- report


def baseline_for(summaries: list[Summary[HttpConfig]], config: HttpConfig) -> Summary[HttpConfig] | None:
    wanted = "direct" if config.upstream == "json" else "direct-sse"
    return next((s for s in summaries if s.config.name == wanted), None)


def table_rows(summaries: list[Summary[HttpConfig]]) -> tuple[list[str], list[list[str]]]:
    header = [
        "config",
        "p50 us",
        "p90 us",
        "p99 us",
        "+p50 us",
        "+p99 us",
        "req/s",
        "req/s min-max",
        "x direct req/s",
        "CPU us/req: proxy",
        "server",
        "clients",
    ]
    rows = []
    for s in summaries:
        base = baseline_for(summaries, s.config)
        p50, p99 = s.median("p50_us"), s.median("p99_us")
        rate = s.median("rate_per_s")
        rates = [r.rate_per_s for r in s.rounds]
        rows.append(
            [
                s.config.name,
                f"{p50:.0f}",
                f"{s.median('p90_us'):.0f}",
                f"{p99:.0f}",
                f"{p50 - base.median('p50_us'):+.0f}" if base else "n/a",
                f"{p99 - base.median('p99_us'):+.0f}" if base else "n/a",
                f"{rate:,.0f}",
                f"{min(rates):,.0f}-{max(rates):,.0f}",
                f"{rate / base.median('rate_per_s'):.2f}" if base else "n/a",
                cpu_cell(s.median("cpu_us")),
                cpu_cell(s.median("server_cpu_us")),
                cpu_cell(s.median("client_cpu_us")),
            ]
        )
    return header, rows


def ratio_lines(summaries: list[Summary[HttpConfig]], clients: int, suffix: str = "") -> list[str]:
    by_name = {s.config.name: s for s in summaries}
    names = (f"direct{suffix}", f"relay{suffix}", f"mcpfault{suffix}")
    if not set(names) <= by_name.keys():
        return [f"ratios need the {', '.join(names)} configurations"] if not suffix else []
    direct, relay, proxy = (by_name[n] for n in names)
    lines = []
    relay_added = relay.median("p50_us") - direct.median("p50_us")
    proxy_added = proxy.median("p50_us") - direct.median("p50_us")
    if relay_added > 0:
        ratio = proxy_added / relay_added
        verdict = "meets" if ratio <= LATENCY_TARGET else "MISSES"
        lines.append(
            f"{names[2]} added p50 / {names[1]} added p50 = {proxy_added:.0f} / {relay_added:.0f} us"
            f" = {ratio:.2f} ({verdict} issue 18's target <= {LATENCY_TARGET:g})"
        )
    else:
        lines.append(f"{names[1]} added p50 is {relay_added:.0f} us (not > 0): latency ratio undefined")
    rate_ratio = proxy.median("rate_per_s") / direct.median("rate_per_s")
    verdict = "meets" if rate_ratio >= THROUGHPUT_TARGET else "MISSES"
    lines.append(
        f"{names[2]} req/s / {names[0]} req/s with {clients} concurrent clients"
        f" = {proxy.median('rate_per_s'):,.0f}"
        f" / {direct.median('rate_per_s'):,.0f} = {rate_ratio:.2f}"
        f" ({verdict} issue 18's target >= {THROUGHPUT_TARGET:g})"
    )
    return lines


TRACED_THROUGHPUT_TARGET = 0.85  # mcpfault-spans-metrics requests/s / direct requests/s, at least (issue 18)


def traced_ratio_lines(summaries: list[Summary[HttpConfig]], clients: int) -> list[str]:
    """With spans and metrics, the concurrent clients' throughput against talking to the server directly."""
    by_name = {s.config.name: s for s in summaries}
    traced, direct = by_name.get("mcpfault-spans-metrics"), by_name.get("direct")
    if traced is None or direct is None:
        return []
    rate_ratio = traced.median("rate_per_s") / direct.median("rate_per_s")
    verdict = "meets" if rate_ratio >= TRACED_THROUGHPUT_TARGET else "MISSES"
    return [
        f"mcpfault-spans-metrics req/s / direct req/s with {clients} concurrent clients"
        f" = {traced.median('rate_per_s'):,.0f} / {direct.median('rate_per_s'):,.0f} = {rate_ratio:.2f}"
        f" ({verdict} issue 18's target >= {TRACED_THROUGHPUT_TARGET:g})"
    ]


FLOOR_LATENCY_TARGET = 1.5  # mcpfault added p50 / relay-uvloop added p50, at most (issue 33)
FLOOR_THROUGHPUT_TARGET = 0.85  # mcpfault-spans-metrics requests/s / relay-uvloop requests/s, at least (issue 33)


def floor_ratio_lines(summaries: list[Summary[HttpConfig]], clients: int) -> list[str]:
    """Against the fast relay (``relay-uvloop``), the floor for a Python HTTP proxy: issue 33's two targets."""
    by_name = {s.config.name: s for s in summaries}
    direct, floor = by_name.get("direct"), by_name.get("relay-uvloop")
    if direct is None or floor is None:
        return []
    lines = []
    floor_added = floor.median("p50_us") - direct.median("p50_us")
    for name in ("mcpfault", "mcpfault-spans", "mcpfault-spans-metrics"):
        proxy = by_name.get(name)
        if proxy is None:
            continue
        added = proxy.median("p50_us") - direct.median("p50_us")
        if floor_added > 0:
            ratio = added / floor_added
            verdict = "meets" if ratio <= FLOOR_LATENCY_TARGET else "MISSES"
            target = f" ({verdict} issue 33's target <= {FLOOR_LATENCY_TARGET:g})" if name == "mcpfault" else ""
            lines.append(
                f"{name} added p50 / relay-uvloop added p50 = {added:.0f} / {floor_added:.0f} us = {ratio:.2f}{target}"
            )
        elif name == "mcpfault":
            lines.append(f"relay-uvloop added p50 is {floor_added:.0f} us (not > 0): latency ratio undefined")
    for name in ("mcpfault", "mcpfault-spans-metrics"):
        proxy = by_name.get(name)
        if proxy is None:
            continue
        ratio = proxy.median("rate_per_s") / floor.median("rate_per_s")
        verdict = "meets" if ratio >= FLOOR_THROUGHPUT_TARGET else "MISSES"
        target = ""
        if name == "mcpfault-spans-metrics":
            target = f" ({verdict} issue 33's target >= {FLOOR_THROUGHPUT_TARGET:g})"
        lines.append(
            f"{name} req/s / relay-uvloop req/s with {clients} concurrent clients"
            f" = {proxy.median('rate_per_s'):,.0f} / {floor.median('rate_per_s'):,.0f} = {ratio:.2f}{target}"
        )
    floor_rate = floor.median("rate_per_s") / direct.median("rate_per_s")
    lines.append(f"relay-uvloop req/s / direct req/s = {floor_rate:.2f}")
    lines += per_round_floor_lines(by_name)
    return lines


def per_round_floor_lines(by_name: dict[str, Summary[HttpConfig]]) -> list[str]:
    """The two targets' ratios round by round: each round runs every configuration side by side, so on a busy
    machine these move less with the machine than the medians of each configuration taken apart."""
    direct, floor = by_name["direct"], by_name["relay-uvloop"]
    lines = []
    proxy = by_name.get("mcpfault")
    if proxy is not None:
        ratios = []
        for d, f, m in zip(direct.rounds, floor.rounds, proxy.rounds, strict=True):
            added = f.p50_us - d.p50_us
            ratios.append(f"{(m.p50_us - d.p50_us) / added:.2f}" if added > 0 else "n/a")
        lines.append("mcpfault added p50 / relay-uvloop added p50, round by round: " + ", ".join(ratios))
    traced = by_name.get("mcpfault-spans-metrics")
    if traced is not None:
        rates = [f"{t.rate_per_s / f.rate_per_s:.2f}" for f, t in zip(floor.rounds, traced.rounds, strict=True)]
        lines.append("mcpfault-spans-metrics req/s / relay-uvloop req/s, round by round: " + ", ".join(rates))
    return lines


def all_ratios(summaries: list[Summary[HttpConfig]], clients: int) -> list[str]:
    return (
        floor_ratio_lines(summaries, clients)
        + ratio_lines(summaries, clients)
        + traced_ratio_lines(summaries, clients)
        + ratio_lines(summaries, clients, "-sse")
    )


def display_command(config: HttpConfig) -> str:
    if not config.command:
        return "(the client talks to the echo server)"
    parts = [display_path(p) if os.path.isabs(p) else p for p in config.command]
    text = shlex.join(parts)
    return text.replace("{upstream}", "http://127.0.0.1:ECHO_PORT/mcp").replace("{spans}", "TMPDIR/spans.jsonl")


def markdown_block(
    summaries: list[Summary[HttpConfig]], args: argparse.Namespace, when: dt.datetime, loads: tuple[str, str]
) -> str:
    header, rows = table_rows(summaries)
    round_header = ["config", *[f"round {i + 1} p50 us / req/s" for i in range(args.rounds)]]
    round_rows = [[s.config.name, *[f"{r.p50_us:.0f} / {r.rate_per_s:,.0f}" for r in s.rounds]] for s in summaries]
    return "\n".join(
        [
            HTTP_BLOCK_BEGIN,
            "",
            "## Streamable HTTP: direct vs minimal relay vs mcpfault",
            "",
            "Generated by `benchmarks/http_overhead.py` (see `benchmarks/README.md`); this block is replaced on every"
            " run, the rest of the file is left alone. The server is `benchmarks/http_echo_server.py` (stdlib"
            " `ThreadingHTTPServer`, HTTP/1.1 keep-alive, JSON answers); the yardsticks are"
            " `benchmarks/http_relay.py` (`relay`: stdlib `ThreadingHTTPServer` + `http.client`, copies status,"
            " headers and body) and `http_relay.py --uvloop` (`relay-uvloop`: asyncio streams on uvloop, heads read"
            " to the blank line, bodies by Content-Length, bytes forwarded, keep-alive: the floor for a Python"
            " HTTP proxy, against which issue 33 sets the targets: mcpfault's added p50 at most 1.5x the"
            " relay-uvloop's, and with spans and metrics at least 0.85x its throughput with 8 clients). Latency is one"
            " sequential 2025-11-25 `tools/call` echo round trip in a session on a keep-alive connection, as the"
            " client sees it; `+p50`/`+p99` are added over `direct`. Throughput (`req/s`) is"
            f" {args.clients} concurrent clients, each with its own connection and session, each making"
            f" {args.calls_per_client} sequential calls; all calls / wall time. Rounds are interleaved (rotating"
            " order, latency in alternating blocks); each figure is the median across rounds. Every answer is"
            " checked (status, id, echoed text). `CPU us/req`, in the throughput runs: the process under test"
            " (all its threads), the echo server, and the benchmark's own client threads (one process: they"
            " share one GIL); with 2 CPUs, what these three use per request bounds the rate.",
            "",
            *run_facts(when, loads, "; client, echo server and the process under test all share these CPUs"),
            f"- Settings: {args.rounds} rounds; {args.calls} sequential calls (+{args.warmup} warm-up) in blocks of"
            f" {args.block}; {args.clients} clients x {args.calls_per_client} calls in {args.throughput_parts}"
            f" alternating parts (+{args.client_warmup} warm-up each); payload {len(args.payload)} bytes of text",
            "",
            format_markdown_table(header, rows),
            "",
            *[f"- {line}" for line in all_ratios(summaries, args.clients)],
            "",
            "Configurations:",
            "",
            *[f"- `{s.config.name}`: `{display_command(s.config)}`" for s in summaries],
            "",
            "Per round:",
            "",
            format_markdown_table(round_header, round_rows),
            "",
            HTTP_BLOCK_END,
        ]
    )


# --------------------------------------------------------------------------- main


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--calls", type=int, help="sequential round trips per configuration and round (default 2000)")
    parser.add_argument("--warmup", type=int, help="untimed round trips before timing (default 200)")
    parser.add_argument("--rounds", type=int, help="interleaved rounds (default 5)")
    parser.add_argument("--block", type=int, default=100, help="calls per alternating latency block (default 100)")
    parser.add_argument("--clients", type=int, default=8, help="concurrent clients for throughput (default 8)")
    parser.add_argument("--calls-per-client", type=int, help="calls each concurrent client makes (default 500)")
    parser.add_argument(
        "--client-warmup", type=int, default=20, help="untimed calls per concurrent client (default 20)"
    )
    parser.add_argument(
        "--throughput-parts", type=int, default=2, help="alternating parts the throughput run is split into (default 2)"
    )
    parser.add_argument("--payload-bytes", type=int, default=64, help="echoed text size (default 64)")
    parser.add_argument(
        "--quick", action="store_true", help="smoke run: --calls 300 --warmup 50 --rounds 2 --calls-per-client 100"
    )
    parser.add_argument(
        "--sse", action="store_true", help="also measure SSE answers (direct-sse, relay-sse, mcpfault-sse)"
    )
    parser.add_argument("--profile", default=DEFAULT_PROFILE, help=f"mcpfault profile (default {DEFAULT_PROFILE})")
    parser.add_argument(
        "--config",
        dest="extra",
        action="append",
        default=[],
        type=parse_http_config,
        metavar="NAME=COMMAND",
        help="an extra front process to measure (repeatable): it must print 'serving URL' or 'listening on URL';"
        " {upstream} in COMMAND is the echo server's URL (the SSE one when NAME ends in -sse)",
    )
    parser.add_argument("--only", help="comma-separated configuration names to run (default: all)")
    parser.add_argument("--timeout", type=float, default=10.0, help="seconds to wait for any answer (default 10)")
    parser.add_argument(
        "--grace", type=float, default=5.0, help="seconds a process gets to stop after SIGTERM (default 5)"
    )
    parser.add_argument("--json", metavar="FILE", help="also write the figures as JSON to FILE")
    parser.add_argument("--markdown", metavar="FILE", help="write/replace the marked HTTP block of FILE (Markdown)")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    fill_defaults(args, QUICK if args.quick else FULL)
    if min(args.calls, args.rounds, args.block, args.clients, args.calls_per_client, args.throughput_parts) < 1:
        print(
            "--calls, --rounds, --block, --clients, --calls-per-client and --throughput-parts must be >= 1",
            file=sys.stderr,
        )
        return 2
    if min(args.warmup, args.client_warmup, args.payload_bytes) < 0:
        print("--warmup, --client-warmup and --payload-bytes must be >= 0", file=sys.stderr)
        return 2
    args.payload = "x" * args.payload_bytes
    profile = resolve_profile(args.profile)
    configs = select_configs(default_configs(str(profile), args.sse) + args.extra, args.only)
    if configs is None:
        return 2
    if not (ROOT / profile).exists():
        print(f"profile {args.profile} not found; pass --profile FILE", file=sys.stderr)
        return 2

    interrupt_on_sigterm()
    when = dt.datetime.now(dt.UTC).astimezone()
    load_at_start = load_average()
    with tempfile.TemporaryDirectory(prefix="mcpfault-http-bench-") as workdir:
        args.workdir = workdir
        try:
            summaries = run(configs, args)
        except (BenchError, KeyboardInterrupt) as exc:
            return failure_status(exc)

    notes = all_ratios(summaries, args.clients)
    loads = print_results(summaries, table_rows(summaries), notes, "SIGTERM", load_at_start)
    if args.json:
        write_figures(Path(args.json), summaries, notes, when, loads, args.rounds)
    if args.markdown:
        path = Path(args.markdown)
        write_http_block(path, markdown_block(summaries, args, when, loads))
        print(f"updated the HTTP block of {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
