"""What does mcpfault cost on the wire, next to talking to the server directly and to a minimal relay?

For each configuration (a named command that speaks MCP on stdio) this starts the command, does
the ``initialize`` handshake, then measures

1. latency: ``--calls`` sequential ``tools/call`` echo round trips, each timed on its own;
2. pipelined throughput: ``--burst`` requests written by a thread while the main thread reads
   every reply; messages/s = burst / elapsed.

Rounds are interleaved (each round runs every configuration once, in rotating order) so drift
and noise on the machine land on all configurations alike; figures are medians across rounds.
Every reply is checked (id and echoed text) after timing, so a fast but wrong transport fails.

Run from the repository root::

    .venv/bin/python benchmarks/stdio_overhead.py                 # full run
    .venv/bin/python benchmarks/stdio_overhead.py --quick         # smoke run
    .venv/bin/python benchmarks/stdio_overhead.py --markdown docs/results/performance.md

Only pipes to local child processes; no network. Every read has a deadline and every child
(and its process group) is killed at the end, so the run always stops on its own.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import math
import os
import select
import shlex
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import IO, Any

from common import (  # a sibling module: benchmarks/ is sys.path[0] when this runs as a script
    INITIALIZED,
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
    write_keeping_http_block,
)

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
ECHO_SERVER = HERE / "echo_server.py"
RELAY = HERE / "relay.py"
DEFAULT_PROFILE = "profiles/baseline.toml"
CHUNK = 65536
# 9 rounds: the medians hold while at most 4 rounds are disturbed by other work (benchmarks/README.md).
FULL = {"calls": 5000, "burst": 20000, "rounds": 9, "warmup": 200}
QUICK = {"calls": 300, "burst": 3000, "rounds": 2, "warmup": 50}


# --------------------------------------------------------------------------- configurations


def default_configs(profile: str) -> list[Config]:
    python = sys.executable
    server = (python, str(ECHO_SERVER))
    configs = [
        Config("direct", server),
        Config("relay", (python, str(RELAY), "--", *server)),
        # The floor for a proxy that understands the messages: the relay, plus a parse of each line
        # and the requests in flight (relay.py --parse). How far 1.5x the relay is from what CPython can do.
        Config("parsing-relay", (python, str(RELAY), "--parse", "--", *server)),
        # `-m mcpfault` is the same entry point as .venv/bin/mcpfault without depending on PATH.
        Config("mcpfault", (python, "-m", "mcpfault", "proxy", "--config", profile, "--", *server)),
    ]
    # The stdio proxy a user would pick instead (PyPI mcp-drill 0.0.1, a dev extra), with no fault
    # asked for; measured side by side so "as fast as the peer" is a figure from the same run.
    drill = Path(python).parent / "mcp-drill"
    if drill.exists():
        configs.append(Config("mcp-drill", (str(drill), "wrap", "--", *server)))
    return configs


# --------------------------------------------------------------------------- child process I/O


class LineReader:
    """Reads newline-terminated messages from a pipe fd with a deadline on every wait.

    Kept deliberately thin (os.read + bytes.find) so the client adds as little as possible to
    the round trip being measured.
    """

    def __init__(self, fd: int, timeout: float) -> None:
        self.fd = fd
        self.timeout = timeout
        self.buf = bytearray()
        self.pos = 0

    def _fill(self) -> None:
        ready, _, _ = select.select([self.fd], [], [], self.timeout)
        if not ready:
            raise BenchError(f"no data from the child within {self.timeout:g} s")
        data = os.read(self.fd, CHUNK)
        if not data:
            raise BenchError("the child closed its stdout (exited?)")
        if self.pos:
            # Compact only when refilling, so consuming a line never moves the whole buffer.
            del self.buf[: self.pos]
            self.pos = 0
        self.buf += data

    def readline(self) -> bytes:
        while True:
            end = self.buf.find(b"\n", self.pos)
            if end >= 0:
                line = bytes(self.buf[self.pos : end + 1])
                self.pos = end + 1
                return line
            self._fill()

    def read_lines(self, count: int) -> list[bytes]:
        """Read exactly ``count`` lines; counts newlines per chunk instead of splitting eagerly."""
        seen = self.buf.count(b"\n", self.pos)
        while seen < count:
            before = len(self.buf) - self.pos
            self._fill()
            seen += self.buf.count(b"\n", self.pos + before)
        lines: list[bytes] = []
        for _ in range(count):
            lines.append(self.readline())
        return lines


def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


class Child:
    """One running configuration: pipes in raw fds, stderr to a temp file (never our pipes)."""

    def __init__(self, config: Config, timeout: float, stderr: IO[bytes]) -> None:
        self.config = config
        self.stderr = stderr
        try:
            self.proc = subprocess.Popen(
                config.command,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=self.stderr,
                bufsize=0,
                cwd=ROOT,
                # Own process group, so the cleanup also reaches grandchildren (the proxied server).
                start_new_session=True,
            )
        except OSError as exc:
            raise BenchError(f"cannot start {shlex.join(config.command)}: {exc}", config.name) from None
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.wfd = self.proc.stdin.fileno()
        self.reader = LineReader(self.proc.stdout.fileno(), timeout)
        self.next_id = 100  # ids below are the handshake's

    def take_ids(self, count: int) -> range:
        # Ids never repeat within a child, so a late or duplicated reply cannot pass the checks.
        ids = range(self.next_id, self.next_id + count)
        self.next_id += count
        return ids

    def send(self, data: bytes) -> None:
        try:
            write_all(self.wfd, data)
        except BrokenPipeError:
            raise BenchError("the child closed its stdin (exited?)") from None

    def request(self, msg_id: int, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        self.send(jsonrpc_request(msg_id, method, params) + b"\n")
        reply = decode(self.reader.readline())
        if reply.get("id") != msg_id:
            raise BenchError(f"{method}: expected the reply to id {msg_id}, got {reply!r:.300}")
        if "result" not in reply:
            raise BenchError(f"{method}: expected a result, got {reply!r:.300}")
        result: dict[str, Any] = reply["result"]
        return result

    def stderr_tail(self, limit: int = 2000) -> str:
        return log_tail(self.stderr, limit)

    def close(self, grace: float) -> int | None:
        """EOF the child, give it ``grace`` seconds to leave, then kill its whole group."""
        with contextlib.suppress(OSError):
            self.proc.stdin.close()  # type: ignore[union-attr]
        code = stop_group(self.proc, grace)
        with contextlib.suppress(OSError):
            self.proc.stdout.close()  # type: ignore[union-attr]
        return code


@contextlib.contextmanager
def running(config: Config, timeout: float, grace: float, exit_codes: list[int | None]) -> Iterator[Child]:
    with tempfile.TemporaryFile() as stderr:
        child = Child(config, timeout, stderr)
        try:
            yield child
        except BaseException as exc:
            exit_codes.append(child.close(grace=0.5))
            tail = child.stderr_tail()
            # Only the culprit's stderr is worth showing; the others were merely alive at the time.
            if isinstance(exc, BenchError):
                culprit = exc.config in (None, config.name)
            else:
                culprit = not isinstance(exc, KeyboardInterrupt)
            if culprit and tail.strip():
                print(f"--- stderr of {config.name} (tail) ---\n{tail}\n---", file=sys.stderr)
            raise
        else:
            exit_codes.append(child.close(grace))


# --------------------------------------------------------------------------- the measurements


def echo_request(msg_id: int, text: str) -> bytes:
    return echo_body(msg_id, text) + b"\n"


def echo_text(msg_id: int, payload: str) -> str:
    # The id inside the text lets the check catch replies paired with the wrong request.
    return f"{msg_id}:{payload}"


def check_echo_replies(lines: Sequence[bytes], ids: Sequence[int], payload: str, ordered: bool) -> None:
    by_id: dict[Any, dict[str, Any]] = {}
    for index, line in enumerate(lines):
        reply = decode(line)
        if ordered and reply.get("id") != ids[index]:
            raise BenchError(f"reply {index}: expected id {ids[index]}, got {line[:300]!r}")
        if reply.get("id") in by_id:
            raise BenchError(f"duplicate reply for id {reply.get('id')!r}")
        by_id[reply.get("id")] = reply
    missing = [i for i in ids if i not in by_id]
    if missing or len(by_id) != len(ids):
        raise BenchError(f"{len(missing)} replies missing (first ids {missing[:5]}), {len(by_id)} received")
    for msg_id in ids:
        reply = by_id[msg_id]
        if not is_echo_result(reply.get("result"), echo_text(msg_id, payload)):
            raise BenchError(f"id {msg_id}: wrong reply {json.dumps(reply)[:300]}")


def handshake(child: Child) -> None:
    check_initialize(child.request(0, "initialize", initialize_params("mcpfault-stdio-bench")))
    child.send(INITIALIZED + b"\n")
    check_echo_tool(child.request(1, "tools/list"))


def measure_latency(child: Child, calls: int, payload: str) -> list[int]:
    """Sequential round trips; returns per-call nanoseconds."""
    ids = child.take_ids(calls)
    # Built up front so the timed loop is only write, read, clock.
    requests = [echo_request(i, echo_text(i, payload)) for i in ids]
    replies: list[bytes] = []
    samples: list[int] = []
    send, readline, clock = child.send, child.reader.readline, time.perf_counter_ns
    for request in requests:
        start = clock()
        send(request)
        reply = readline()
        samples.append(clock() - start)
        replies.append(reply)
    check_echo_replies(replies, ids, payload, ordered=True)
    return samples


def measure_burst(child: Child, burst: int, payload: str) -> int:
    """Pipelined burst: a writer thread floods requests while we read; returns elapsed nanoseconds."""
    ids = child.take_ids(burst)
    blob = b"".join(echo_request(i, echo_text(i, payload)) for i in ids)
    failure: list[BaseException] = []

    def writer() -> None:
        try:
            child.send(blob)
        except BaseException as exc:  # reported by the main thread
            failure.append(exc)

    # Daemon: if the child stalls, the writer blocks in os.write until cleanup kills the child.
    thread = threading.Thread(target=writer, name=f"burst-writer-{child.config.name}", daemon=True)
    start = time.perf_counter_ns()
    thread.start()
    try:
        lines = child.reader.read_lines(burst)
    except BenchError:
        if failure:
            raise BenchError(f"writer failed: {failure[0]!r}") from None
        raise
    elapsed = time.perf_counter_ns() - start
    thread.join(timeout=child.reader.timeout)
    if failure:
        raise BenchError(f"writer failed: {failure[0]!r}")
    # Ordering is not part of JSON-RPC, so only completeness and correctness are required here.
    check_echo_replies(lines, ids, payload, ordered=False)
    return elapsed


# --------------------------------------------------------------------------- rounds


def run_round(summaries: list[Summary[Config]], round_index: int, args: argparse.Namespace) -> list[RoundResult]:
    """One round: every configuration alive side by side, measured in small alternating blocks.

    On a small VM the cost of waking a sleeping process (most of a round trip) shifts by several
    times within seconds as other work comes and goes; alternating blocks of ~100 calls exposes
    every configuration to the same shifts, which one-after-the-other runs do not.
    """
    count = len(summaries)
    latency: list[list[int]] = [[] for _ in summaries]
    elapsed_ns = [0] * count
    with contextlib.ExitStack() as stack:
        by_index: dict[int, Child] = {}
        for index in rotated(count, round_index):
            summary = summaries[index]
            with blame(summary.config.name):
                child = stack.enter_context(running(summary.config, args.timeout, args.grace, summary.exit_codes))
                handshake(child)
                measure_latency(child, args.warmup, args.payload)  # warm-up, discarded
            by_index[index] = child
        for block, size in enumerate(split(args.calls, math.ceil(args.calls / args.block))):
            for index in rotated(count, round_index + block):
                with blame(summaries[index].config.name):
                    latency[index] += measure_latency(by_index[index], size, args.payload)
        cpu = [0.0] * count  # the configuration's own process during its bursts (not the server behind it)
        for part, size in enumerate(split(args.burst, args.burst_parts)):
            for index in rotated(count, round_index + part):
                with blame(summaries[index].config.name):
                    pid = by_index[index].proc.pid
                    before = cpu_ns(pid)
                    elapsed_ns[index] += measure_burst(by_index[index], size, args.payload)
                    cpu[index] += cpu_ns(pid) - before
    return [
        round_result(samples, args.burst, elapsed, (used,))
        for samples, elapsed, used in zip(latency, elapsed_ns, cpu, strict=True)
    ]


def run(configs: list[Config], args: argparse.Namespace) -> list[Summary[Config]]:
    summaries = [Summary(c) for c in configs]
    for round_index in range(args.rounds):
        results = run_round(summaries, round_index, args)
        progress = []
        for summary, result in zip(summaries, results, strict=True):
            summary.rounds.append(result)
            progress.append(
                f"{summary.config.name} p50 {result.p50_us:.1f} us p99 {result.p99_us:.1f} us"
                f" {result.rate_per_s:,.0f} msg/s"
            )
        print(f"round {round_index + 1}/{args.rounds}: " + " | ".join(progress), file=sys.stderr)
    return summaries


# --------------------------------------------------------------------------- report


def table_rows(summaries: list[Summary[Config]]) -> tuple[list[str], list[list[str]]]:
    base = next((s for s in summaries if s.config.name == "direct"), None)
    header = ["config", "p50 us", "p90 us", "p99 us", "+p50 us", "+p99 us", "msgs/s", "msgs/s min-max", "CPU us/msg"]
    rows = []
    for s in summaries:
        p50, p99 = s.median("p50_us"), s.median("p99_us")
        added_p50 = f"{p50 - base.median('p50_us'):+.1f}" if base else "n/a"
        added_p99 = f"{p99 - base.median('p99_us'):+.1f}" if base else "n/a"
        rates = [r.rate_per_s for r in s.rounds]
        rows.append(
            [
                s.config.name,
                f"{p50:.1f}",
                f"{s.median('p90_us'):.1f}",
                f"{p99:.1f}",
                added_p50,
                added_p99,
                f"{s.median('rate_per_s'):,.0f}",
                f"{min(rates):,.0f}-{max(rates):,.0f}",
                cpu_cell(s.median("cpu_us")),
            ]
        )
    return header, rows


# Issue 33's stdio targets, each taken within one run. (name, numerator, denominator, what is
# compared, at most / at least, target). The ratio is of added p50s over direct, or of pipelined
# msgs/s; it is printed for the medians and for every round, since it must hold in every run.
TRACED = "mcpfault-traced"
TARGETS: list[tuple[str, str, str, str, str, float]] = [
    ("untraced against the floor", "mcpfault", "parsing-relay", "added p50", "<=", 1.5),
    ("spans against untraced", TRACED, "mcpfault", "added p50", "<=", 1.1),
    ("pipelined with spans against the relay", TRACED, "relay", "msgs/s", ">=", 0.6),
    ("spans against the peer, untraced", TRACED, "mcp-drill", "added p50", "<", 1.0),
]


def _figures(summary: Summary[Config], direct: Summary[Config] | None, what: str) -> tuple[float, list[float]]:
    """A configuration's median and per-round figure: added p50 over direct (the same round's), or msgs/s."""
    if what == "msgs/s":
        return summary.median("rate_per_s"), [r.rate_per_s for r in summary.rounds]
    assert direct is not None
    per_round = [r.p50_us - d.p50_us for r, d in zip(summary.rounds, direct.rounds, strict=True)]
    return summary.median("p50_us") - direct.median("p50_us"), per_round


def _holds(ratio: float, sense: str, target: float) -> bool:
    return {"<=": ratio <= target, "<": ratio < target, ">=": ratio >= target}[sense]


def _target_line(summaries: dict[str, Summary[Config]], target: tuple[str, str, str, str, str, float]) -> str:
    label, top, bottom, what, sense, value = target
    direct = summaries.get("direct")
    if what != "msgs/s" and direct is None:
        return f"{label}: needs the direct configuration"
    top_median, top_rounds = _figures(summaries[top], direct, what)
    bottom_median, bottom_rounds = _figures(summaries[bottom], direct, what)
    unit = "" if what == "msgs/s" else " us"
    digits = 0 if what == "msgs/s" else 1
    figures = f"{top_median:,.{digits}f} / {bottom_median:,.{digits}f}{unit}"
    if bottom_median <= 0 or min(bottom_rounds) <= 0:
        return f"{label}: {top} {what} / {bottom} {what} = {figures}: undefined (not > 0), noise dominates"
    ratio = top_median / bottom_median
    rounds = [t / b for t, b in zip(top_rounds, bottom_rounds, strict=True)]
    missed = [str(i + 1) for i, r in enumerate(rounds) if not _holds(r, sense, value)]
    held = [str(i + 1) for i, r in enumerate(rounds) if _holds(r, sense, value)]
    if not _holds(ratio, sense, value):
        where = f"held in round {', '.join(held)}" if held else "in every round"
        verdict = f"MISSES target {sense} {value:g}, {where}"
    elif missed:
        verdict = f"meets target {sense} {value:g} by the medians, MISSES it in round {', '.join(missed)}"
    else:
        verdict = f"meets target {sense} {value:g} in every round"
    return (
        f"{label}: {top} {what} / {bottom} {what} = {figures} = {ratio:.3f} ({verdict});"
        f" round by round: {', '.join(f'{r:.3f}' for r in rounds)}"
    )


def ratios(summaries: list[Summary[Config]]) -> list[str]:
    """Issue 33's targets (those whose configurations ran), then figures without a target."""
    by_name = {s.config.name: s for s in summaries}
    lines = [_target_line(by_name, t) for t in TARGETS if {t[1], t[2]} <= by_name.keys()]
    if not lines:
        lines.append(f"issue 33's targets need mcpfault, {TRACED}, parsing-relay, relay and mcp-drill")
    direct = by_name.get("direct")

    def added(name: str) -> float:
        assert direct is not None
        return by_name[name].median("p50_us") - direct.median("p50_us")

    if direct is not None and {"relay", "parsing-relay"} <= by_name.keys() and added("relay") > 0:
        # The floor against the minimal relay: what parsing each line and tracking ids cost alone.
        relay = added("relay")
        lines.append(f"(no target) parsing-relay added p50 / relay added p50 = {added('parsing-relay') / relay:.2f}")
        if "mcpfault" in by_name:  # issue 18's target, retired by issue 33: below what a parsing proxy can do
            lines.append(f"(no target) mcpfault added p50 / relay added p50 = {added('mcpfault') / relay:.2f}")
    if {"mcpfault", "relay"} <= by_name.keys():
        rate = by_name["mcpfault"].median("rate_per_s") / by_name["relay"].median("rate_per_s")
        lines.append(f"(no target) mcpfault msgs/s / relay msgs/s = {rate:.2f}")
    if direct is not None and TRACED in by_name and added(TRACED) > 0:
        # Opt-in extras next to spans alone: metrics, the leg upstream as a CLIENT span.
        for extra in ("mcpfault-traced-metrics", "mcpfault-traced-client-spans"):
            if extra in by_name:
                rate = by_name[extra].median("rate_per_s") / by_name[TRACED].median("rate_per_s")
                lines.append(
                    f"(no target) {extra} added p50 / {TRACED} added p50 = {added(extra) / added(TRACED):.2f};"
                    f" msgs/s {rate:.2f}x"
                )
    return lines


def markdown_report(
    summaries: list[Summary[Config]], args: argparse.Namespace, started: dt.datetime, loads: tuple[str, str]
) -> str:
    header, rows = table_rows(summaries)
    config_lines = [
        f"- `{s.config.name}`: `{shlex.join(display_path(p) for p in s.config.command)}`" for s in summaries
    ]
    round_header = ["config", *[f"round {i + 1} p50 us / msgs/s" for i in range(args.rounds)]]
    round_rows = [[s.config.name, *[f"{r.p50_us:.1f} / {r.rate_per_s:,.0f}" for r in s.rounds]] for s in summaries]
    return "\n".join(
        [
            "# Performance: stdio overhead",
            "",
            "## direct vs minimal relay vs mcpfault",
            "",
            "Generated by `benchmarks/stdio_overhead.py` (see `benchmarks/README.md`). Latency is the time of one"
            " sequential `tools/call` echo round trip seen by the client; `+p50`/`+p99` are added over `direct`."
            " Throughput is a pipelined burst of requests written by one thread while another reads the replies."
            " In each round all configurations run side by side and are measured in alternating blocks"
            " (rotating order), so machine noise hits them alike; each figure is the median across rounds."
            " CPU us/msg: what the configuration's own process (all its threads, not the server it runs) used per"
            " message during the bursts; for direct, the echo server itself.",
            "",
            *run_facts(started, loads),
            f"- Settings: {args.rounds} rounds, {args.calls} sequential calls (+{args.warmup} warm-up),"
            f" in blocks of {args.block}; burst of {args.burst} in {args.burst_parts} parts;"
            f" payload {len(args.payload)} bytes of text",
            "",
            format_markdown_table(header, rows),
            "",
            *[f"- {line}" for line in ratios(summaries)],
            "",
            "Configurations:",
            "",
            *config_lines,
            "",
            "Per round:",
            "",
            format_markdown_table(round_header, round_rows),
            "",
        ]
    )


# --------------------------------------------------------------------------- main


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    # None means "not given", so --quick can fill in only what the command line left open.
    parser.add_argument("--calls", type=int, help="sequential round trips per run (default 5000)")
    parser.add_argument("--burst", type=int, help="pipelined requests per run (default 20000)")
    parser.add_argument("--rounds", type=int, help="interleaved rounds (default 9)")
    parser.add_argument("--warmup", type=int, help="untimed round trips before timing (default 200)")
    parser.add_argument("--block", type=int, default=100, help="calls per alternating latency block (default 100)")
    parser.add_argument(
        "--burst-parts", type=int, default=4, help="sub-bursts the burst is split into, alternating (default 4)"
    )
    parser.add_argument("--payload-bytes", type=int, default=64, help="echoed text size (default 64)")
    parser.add_argument(
        "--quick", action="store_true", help="smoke run: --calls 300 --burst 3000 --rounds 2 --warmup 50"
    )
    parser.add_argument("--profile", default=DEFAULT_PROFILE, help=f"mcpfault profile (default {DEFAULT_PROFILE})")
    parser.add_argument(
        "--config",
        dest="extra",
        action="append",
        default=[],
        type=parse_extra_config,
        metavar="NAME=COMMAND",
        help="an extra configuration to measure (repeatable); COMMAND is split like a shell would",
    )
    parser.add_argument("--only", help="comma-separated configuration names to run (default: all)")
    parser.add_argument("--timeout", type=float, default=10.0, help="seconds to wait for any message (default 10)")
    parser.add_argument("--grace", type=float, default=5.0, help="seconds a child gets to exit after EOF (default 5)")
    parser.add_argument("--json", metavar="FILE", help="also write the figures as JSON to FILE")
    parser.add_argument("--markdown", metavar="FILE", help="also write the report as Markdown to FILE")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    fill_defaults(args, QUICK if args.quick else FULL)
    if min(args.calls, args.burst, args.rounds, args.block, args.burst_parts) < 1:
        print("--calls, --burst, --rounds, --block and --burst-parts must be >= 1", file=sys.stderr)
        return 2
    if args.warmup < 0 or args.payload_bytes < 0:
        print("--warmup and --payload-bytes must be >= 0", file=sys.stderr)
        return 2
    args.payload = "x" * args.payload_bytes

    profile = resolve_profile(args.profile)
    configs = select_configs(default_configs(str(profile)) + args.extra, args.only)
    if configs is None:
        return 2
    if "mcpfault" in {c.name for c in configs} and not (ROOT / profile).exists():
        print(f"profile {args.profile} not found; pass --profile FILE or --only direct,relay", file=sys.stderr)
        return 2

    interrupt_on_sigterm()
    started = dt.datetime.now(dt.UTC).astimezone()
    load_at_start = load_average()
    try:
        summaries = run(configs, args)
    except (BenchError, KeyboardInterrupt) as exc:
        return failure_status(exc)

    notes = ratios(summaries)
    loads = print_results(summaries, table_rows(summaries), notes, "EOF", load_at_start)
    if args.json:
        write_figures(Path(args.json), summaries, notes, started, loads, args.rounds)
    if args.markdown:
        path = Path(args.markdown)
        # http_overhead.py keeps its own marked block in the same file: leave it as it was.
        write_keeping_http_block(path, markdown_report(summaries, args, started, loads))
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
