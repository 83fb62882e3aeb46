"""Where does the HTTP proxy's CPU go? Its CPU per request under concurrent clients, and by part.

Starts ``http_echo_server.py`` and ``mcpfault proxy --listen 127.0.0.1:0 --upstream URL`` in front of it
(``--spans``, ``--metrics`` and ``--events`` add those), opens ``--clients`` keep-alive connections (each
with its own 2025-11-25 session; ``--era modern``: 2026-07-28 requests, stateless) and has them all make
``--calls`` echo calls at once, ``--rounds`` times. Each round prints the proxy's CPU per request (user and
system time of all its threads, from /proc) and that of the span writer process it may start; then the
medians.

With ``--cprofile`` the proxy runs under cProfile, and its main thread's time is shown by part (event
loop, socket writes, parser callbacks, headers, pool, exchange objects, core and engine, spans, metrics;
a builtin's time goes to its caller's part), per request over the whole run (start-up is in "other").
cProfile's own cost inflates the Python parts, so the figures compare parts and versions, not absolute
costs; the CPU rounds (without ``--cprofile``) are the real cost.
The span writer thread is not in the profile: compare ``--spans`` rounds with and without for its share.

Run from the repository root (any mcpfault on ``PYTHONPATH`` is the one measured)::

    .venv/bin/python benchmarks/http_profile.py                              # untraced, 2025-11-25
    .venv/bin/python benchmarks/http_profile.py --era modern --spans --metrics
    .venv/bin/python benchmarks/http_profile.py --cprofile

Only loopback TCP; every read has a deadline and both children are stopped at the end.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import os
import pstats
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import http_overhead as bench  # a sibling script: benchmarks/ is sys.path[0] when this runs as a script
from common import BenchError, failure_status, resolve_profile

TICKS = os.sysconf("SC_CLK_TCK")
MODERN = "2026-07-28"
META_PROTOCOL_VERSION = "io.modelcontextprotocol/protocolVersion"


# --------------------------------------------------------------------------- CPU from /proc


def _threads_cpu_s(pid: int) -> tuple[float, float]:
    """User and system seconds of every thread of ``pid`` (0, 0 once it is gone)."""
    user = system = 0.0
    with contextlib.suppress(OSError):
        for task in Path(f"/proc/{pid}/task").iterdir():
            with contextlib.suppress(OSError):
                fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
                user += int(fields[11]) / TICKS
                system += int(fields[12]) / TICKS
    return user, system


def _main_thread_cpu_s(pid: int) -> float:
    """User and system seconds of ``pid``'s main thread (the event loop's), 0 once it is gone."""
    with contextlib.suppress(OSError):
        fields = Path(f"/proc/{pid}/task/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / TICKS
    return 0.0


def _children(pid: int) -> list[int]:
    found: list[int] = []
    with contextlib.suppress(OSError):
        for task in Path(f"/proc/{pid}/task").iterdir():
            with contextlib.suppress(OSError):
                found += [int(child) for child in (task / "children").read_text().split()]
    return found


# --------------------------------------------------------------------------- a 2026-07-28 client


class ModernClient(bench.McpClient):
    """A client of the 2026-07-28 era: ``server/discover``, then requests with the version in ``_meta``."""

    def handshake(self) -> None:
        self.session_id = None
        answer = self.conn.roundtrip(self._post(0, "server/discover", {}))
        if answer.status != 200 or MODERN not in json.dumps(bench.decode_message(answer)):
            raise BenchError(f"server/discover: HTTP {answer.status}: {answer.body[:300]!r}")

    def echo_requests(self, count: int, payload: str) -> tuple[range, list[bytes]]:
        ids = range(self.next_id, self.next_id + count)
        self.next_id += count
        params = [{"name": "echo", "arguments": {"text": self.text(i, payload)}} for i in ids]
        return ids, [self._post(i, "tools/call", p, "echo") for i, p in zip(ids, params, strict=True)]

    def _post(self, msg_id: int, method: str, params: dict[str, Any], name: str = "") -> bytes:
        body = json.dumps(
            {
                "jsonrpc": "2.0",
                "id": msg_id,
                "method": method,
                "params": {**params, "_meta": {META_PROTOCOL_VERSION: MODERN}},
            },
            separators=(",", ":"),
        ).encode()
        head = (
            f"POST {self.path} HTTP/1.1\r\nHost: {self.host_header}\r\nContent-Type: application/json\r\n"
            f"Accept: application/json, text/event-stream\r\nMCP-Protocol-Version: {MODERN}\r\nMcp-Method: {method}\r\n"
        )
        if name:
            head += f"Mcp-Name: {name}\r\n"
        return f"{head}Content-Length: {len(body)}\r\n\r\n".encode() + body


# --------------------------------------------------------------------------- the parts of a profile

Test = Callable[[str, str], bool]


def _in(*files: str) -> Callable[[str], bool]:
    return lambda path: any(path.endswith(f) for f in files)


_HTTP = _in("proxy/http/server.py", "proxy/http/upstream.py")
_HEADERS = {"forwarded_head", "answer_head", "_forwarded", "relayed_headers", "json_answer", "header_block"}
_HEADERS |= {"head_bytes", "_head", "_status_line", "encode", "headers"}
_POOL = {"request", "answer", "send_idle", "_connection", "_connect", "give_back", "_notify", "request_head"}
_POOL |= {"lost", "_forget", "done", "resume", "pause", "release"}
# In order: the first part whose test a function passes is its part.
PARTS: list[tuple[str, Test]] = [
    ("event loop (C: reads, wake-ups)", lambda path, name: path.endswith("asyncio/runners.py") and name == "run"),
    ("socket writes", lambda path, name: _HTTP(path) and name in ("write", "send")),
    ("parser callbacks", lambda path, name: _HTTP(path) and (name.startswith("on_") or name == "data_received")),
    ("headers", lambda path, name: ("proxy/http/" in path and name in _HEADERS) or "multidict" in path),
    ("pool", lambda path, name: path.endswith("proxy/http/upstream.py") and name in _POOL),
    ("exchange objects, tasks, coroutines", lambda path, name: "proxy/http/" in path or "asyncio/" in path),
    ("core, engine, sessions", lambda path, name: any(p in path for p in ("proxy/core", "faults/", "protocol/"))),
    ("spans", lambda path, name: any(p in path for p in ("observe.py", "span_endings.py", "telemetry/fastspans"))),
    ("metrics", lambda path, name: "telemetry/metrics" in path or "tallies" in path or "prometheus" in path),
]
OTHER = "other (start-up, logging, ...)"


def parts(profile: Path) -> dict[str, float]:
    """Seconds of the profiled thread by part; a builtin's time goes to its callers' parts."""

    def part_of(path: str, name: str) -> str:
        return next((part for part, test in PARTS if test(path, name)), OTHER)

    totals: collections.Counter[str] = collections.Counter()
    stats: dict[Any, Any] = pstats.Stats(str(profile)).stats  # type: ignore[attr-defined]
    for (path, _line, name), (_cc, _nc, own, _cum, callers) in stats.items():
        if path == "~" and callers:  # a builtin: shared among its callers by what each spent in it
            spent = sum(c[2] for c in callers.values()) or 1.0
            for (caller_path, _, caller_name), caller in callers.items():
                totals[part_of(caller_path, caller_name)] += own * caller[2] / spent
        else:
            totals[part_of(path, name)] += own
    return {part: totals[part] for part in [*(p for p, _ in PARTS), OTHER]}


# --------------------------------------------------------------------------- the run


@contextlib.contextmanager
def running(args: argparse.Namespace, workdir: Path) -> Iterator[tuple[bench.Process, str]]:
    exit_codes: list[int | None] = []
    echo = [sys.executable, str(bench.ECHO_SERVER), "0"]
    with bench.started("echo-server", echo, args, exit_codes) as (_server, upstream):
        command = [sys.executable]
        if args.cprofile:
            command += ["-m", "cProfile", "-o", str(workdir / "proxy.prof")]
        command += ["-m", "mcpfault", "proxy", "--config", str(args.profile), "--no-summary"]
        command += ["--listen", "127.0.0.1:0", "--upstream", upstream]
        if args.spans:
            command += ["--spans", str(workdir / "spans.jsonl")]
        if args.metrics:
            command += ["--metrics-addr", "127.0.0.1:0"]
        if args.events:
            command += ["--events", str(workdir / "events.jsonl")]
        with bench.started("mcpfault", command, args, exit_codes) as started:
            yield started


def measure(args: argparse.Namespace, workdir: Path) -> int:
    client_type = ModernClient if args.era == "modern" else bench.McpClient
    clients_n, calls = int(args.clients), int(args.calls)
    requests = 0  # every POST the proxy answered, handshakes and warm-up included (the profile has them all)
    rounds: list[tuple[float, float, float, float]] = []
    with running(args, workdir) as (proxy, url), contextlib.ExitStack() as stack:
        clients = []
        for number in range(args.clients):
            client = client_type(url, args.timeout, f"C{number}")
            stack.callback(client.close)
            client.handshake()
            client.calls(args.warmup, args.payload, timed=False)
            clients.append(client)
        requests += clients_n * (int(args.warmup) + (1 if args.era == "modern" else 3))
        pid = proxy.proc.pid
        for number in range(1, args.rounds + 1):
            writers = _children(pid)
            user, system = _threads_cpu_s(pid)
            main_thread = _main_thread_cpu_s(pid)
            writing = sum(sum(_threads_cpu_s(child)) for child in writers)
            bench.concurrent_calls(clients, calls, args.payload, args.timeout)
            done = clients_n * calls
            requests += done
            after_user, after_system = _threads_cpu_s(pid)
            main_s = _main_thread_cpu_s(pid) - main_thread
            writer_s = sum(sum(_threads_cpu_s(child)) for child in writers) - writing
            figures = (
                (after_user - user) / done * 1e6,
                (after_system - system) / done * 1e6,
                main_s / done * 1e6,
                writer_s / done * 1e6,
            )
            rounds.append(figures)
            print(f"round {number}/{args.rounds}: {_cpu_line(*figures)}", file=sys.stderr)
    medians = (statistics.median(r[i] for r in rounds) for i in range(4))
    print(f"median of {args.rounds} rounds, {args.clients} clients x {args.calls} calls, era {args.era}: ", end="")
    print(_cpu_line(*medians))
    return requests


def _cpu_line(user: float, system: float, main_thread: float, writer: float) -> str:
    """The CPU of a round (or the medians), in microseconds per request."""
    return (
        f"proxy CPU {user + system:.1f} us/req (user {user:.1f}, system {system:.1f}; main thread {main_thread:.1f}, "
        f"other threads {user + system - main_thread:.1f}), span writer process {writer:.1f} us/req"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--era", choices=("legacy", "modern"), default="legacy", help="protocol era (default legacy)")
    parser.add_argument("--spans", action="store_true", help="proxy --spans FILE")
    parser.add_argument("--metrics", action="store_true", help="proxy --metrics-addr 127.0.0.1:0")
    parser.add_argument("--events", action="store_true", help="proxy --events FILE")
    parser.add_argument("--cprofile", action="store_true", help="run the proxy under cProfile; show its time by part")
    parser.add_argument("--profile-out", type=Path, help="with --cprofile, also keep the profile (pstats) in this file")
    parser.add_argument("--clients", type=int, default=8, help="concurrent clients (default 8)")
    parser.add_argument("--calls", type=int, default=2000, help="calls per client and round (default 2000)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds (default 3)")
    parser.add_argument("--warmup", type=int, default=50, help="untimed calls per client first (default 50)")
    parser.add_argument("--payload-bytes", type=int, default=64, help="echoed text size (default 64)")
    parser.add_argument("--profile", default="profiles/baseline.toml", help="mcpfault profile (default baseline)")
    parser.add_argument("--timeout", type=float, default=10.0, help="seconds to wait for any answer (default 10)")
    parser.add_argument("--grace", type=float, default=5.0, help="seconds a child gets to stop (default 5)")
    args = parser.parse_args(argv)
    args.profile = resolve_profile(args.profile)
    args.payload = "x" * args.payload_bytes
    try:
        with tempfile.TemporaryDirectory(prefix="mcpfault-http-profile-") as workdir:
            started = time.monotonic()
            requests = measure(args, Path(workdir))
            if args.cprofile:
                if args.profile_out is not None:
                    shutil.copyfile(Path(workdir) / "proxy.prof", args.profile_out)
                seconds = parts(Path(workdir) / "proxy.prof")
                print(f"\nthe proxy's main thread by part, under cProfile (us per request, {requests:,} requests):")
                for part, spent in seconds.items():
                    print(f"  {part:38s} {spent / requests * 1e6:7.1f}")
                print(f"  {'total':38s} {sum(seconds.values()) / requests * 1e6:7.1f}")
            print(f"({time.monotonic() - started:.0f} s)", file=sys.stderr)
    except (BenchError, KeyboardInterrupt) as exc:
        return failure_status(exc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
