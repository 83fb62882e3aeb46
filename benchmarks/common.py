"""What the benchmark drivers share: errors, configurations, the echo exchange, statistics and the report.

Used by ``stdio_overhead.py``, ``http_overhead.py`` and ``profile_hotpath.py``. benchmarks/ is a folder of
scripts, not a package: they run as ``python benchmarks/X.py`` (so benchmarks/ is ``sys.path[0]``) and import
this as a sibling, ``from common import ...``; mypy resolves it the same way. The yardsticks (``echo_server.py``,
``relay.py``, ``http_echo_server.py``, ``http_relay.py``) deliberately import nothing of ours.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import math
import os
import platform
import shlex
import signal
import statistics
import subprocess
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Generic, TypeVar

PROTOCOL_VERSION = "2025-11-25"
INITIALIZED = b'{"jsonrpc":"2.0","method":"notifications/initialized"}'
# http_overhead.py owns this block of the report that stdio_overhead.py writes; each keeps the other's part.
HTTP_BLOCK_BEGIN = "<!-- http-benchmark:begin -->"
HTTP_BLOCK_END = "<!-- http-benchmark:end -->"


class BenchError(RuntimeError):
    """A configuration misbehaved: no reply in time, a wrong reply, an early exit.

    ``config`` names the configuration it happened in; :func:`blame` fills it in where the raiser did not know.
    """

    def __init__(self, message: str, config: str | None = None) -> None:
        super().__init__(message)
        self.config = config


@contextlib.contextmanager
def blame(name: str) -> Iterator[None]:
    """Tag a failure with the configuration it happened in (several children are alive at once)."""
    try:
        yield
    except BenchError as exc:
        if exc.config is None:
            exc.config = name
        raise


def failure_status(exc: BenchError | KeyboardInterrupt) -> int:
    """Say on stderr why the run stopped; returns the exit status (1 for a failure, 130 for Ctrl-C)."""
    if isinstance(exc, KeyboardInterrupt):
        print("\ninterrupted", file=sys.stderr)
        return 130
    print(f"\nbenchmark failed in {exc.config or '?'}: {exc}", file=sys.stderr)
    return 1


# --------------------------------------------------------------------------- configurations


@dataclass(frozen=True)
class Config:
    """A configuration to measure: its name in the report and the command line that starts it."""

    name: str
    command: tuple[str, ...]


ConfigT = TypeVar("ConfigT", bound=Config)


def parse_extra_config(spec: str) -> Config:
    """``--config NAME=COMMAND`` (an argparse ``type``); COMMAND is split like a shell would."""
    name, sep, command = spec.partition("=")
    if not sep or not name.strip() or not command.strip():
        raise argparse.ArgumentTypeError(f"expected NAME=COMMAND, got {spec!r}")
    return Config(name.strip(), tuple(shlex.split(command)))


def select_configs(configs: list[ConfigT], only: str | None) -> list[ConfigT] | None:
    """The configurations ``--only`` names (all without it); None, after saying why on stderr, on a bad choice."""
    if only:
        wanted = [name.strip() for name in only.split(",") if name.strip()]
        unknown = set(wanted) - {c.name for c in configs}
        if unknown:
            print(f"--only: unknown configuration(s) {sorted(unknown)}", file=sys.stderr)
            return None
        configs = [c for c in configs if c.name in wanted]
    names = [c.name for c in configs]
    if len(set(names)) != len(names):
        print(f"configuration names must be unique: {names}", file=sys.stderr)
        return None
    return configs


def fill_defaults(args: argparse.Namespace, defaults: dict[str, int]) -> None:
    """Set each option in ``defaults`` that the command line left at None (so --quick fills only what is open)."""
    for name, value in defaults.items():
        if getattr(args, name) is None:
            setattr(args, name, value)


def resolve_profile(profile: str) -> Path:
    """Children run in the repo root; a profile path relative to the caller's cwd must survive that."""
    path = Path(profile)
    if not path.is_absolute() and path.exists():
        path = path.resolve()
    return path


# --------------------------------------------------------------------------- child processes


def log_tail(log: IO[bytes], limit: int) -> str:
    """The last ``limit`` bytes a child wrote to its log file (a temp file, never our pipes)."""
    log.flush()
    size = log.seek(0, os.SEEK_END)
    log.seek(max(0, size - limit))
    return log.read().decode("utf-8", "replace")


def interrupt_on_sigterm() -> None:
    """SIGTERM ends a run as Ctrl-C does, through the cleanup that stops the children: they run in
    sessions of their own, which a signal to the benchmark does not reach, and Python's default SIGTERM
    skips every ``finally`` (a proxy was left running after ``kill`` of the HTTP benchmark)."""

    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, interrupt)


def stop_group(proc: subprocess.Popen[bytes], grace: float) -> int | None:
    """Give ``proc`` ``grace`` seconds to leave, then SIGKILL its process group (it was started in a session of
    its own, so this reaches anything it started). Returns its exit code, None when it had to be killed."""
    code: int | None
    try:
        code = proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        code = None
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    if code is None:
        proc.kill()
        proc.wait()
    return code


# --------------------------------------------------------------------------- the echo exchange


def jsonrpc_request(msg_id: int, method: str, params: dict[str, Any] | None = None) -> bytes:
    """A JSON-RPC request, without framing."""
    message: dict[str, Any] = {"jsonrpc": "2.0", "id": msg_id, "method": method}
    if params is not None:
        message["params"] = params
    return json.dumps(message).encode()


def initialize_params(client_name: str) -> dict[str, Any]:
    return {
        "protocolVersion": PROTOCOL_VERSION,
        "capabilities": {},
        "clientInfo": {"name": client_name, "version": "1.0.0"},
    }


def check_initialize(result: dict[str, Any]) -> None:
    if result.get("protocolVersion") != PROTOCOL_VERSION:
        raise BenchError(f"initialize: unexpected result {result!r:.300}")


def check_echo_tool(result: dict[str, Any]) -> None:
    """The ``tools/list`` result must offer the ``echo`` tool."""
    tools = result.get("tools")
    if not isinstance(tools, list) or not any(isinstance(t, dict) and t.get("name") == "echo" for t in tools):
        raise BenchError(f"tools/list: no echo tool in {tools!r:.300}")


def echo_body(msg_id: int, text: str) -> bytes:
    """A ``tools/call`` of ``echo``, without framing; compact, as a real client would send it."""
    # Built by hand so building many is cheap; json.dumps of the text alone handles the escaping.
    return (
        '{"jsonrpc":"2.0","id":'
        + str(msg_id)
        + ',"method":"tools/call","params":{"name":"echo","arguments":{"text":'
        + json.dumps(text)
        + "}}}"
    ).encode()


def is_echo_result(result: object, text: str) -> bool:
    """Whether ``result`` is the echo tool's successful answer for ``text``."""
    return (
        isinstance(result, dict)
        and result.get("isError") is False
        and result.get("content") == [{"type": "text", "text": text}]
        and result.get("structuredContent") == {"text": text}
    )


def decode(raw: bytes) -> dict[str, Any]:
    """One JSON object; anything else is a :class:`BenchError`."""
    try:
        value = json.loads(raw)
    except ValueError:
        raise BenchError(f"not JSON: {raw[:300]!r}") from None
    if not isinstance(value, dict):
        raise BenchError(f"not a JSON object: {raw[:300]!r}")
    return value


# --------------------------------------------------------------------------- rounds and stats


@dataclass
class RoundResult:
    """One configuration in one round: latency percentiles and throughput."""

    p50_us: float
    p90_us: float
    p99_us: float
    rate_per_s: float  # messages/s (stdio burst) or requests/s (concurrent HTTP clients)
    # CPU microseconds per message (request) during the throughput run: the configuration's own process
    # (the proxy, the relay; for stdio's direct the server), and for HTTP the echo server and our clients.
    cpu_us: float = math.nan
    server_cpu_us: float = math.nan
    client_cpu_us: float = math.nan


@dataclass
class Summary(Generic[ConfigT]):
    """One configuration across all rounds."""

    config: ConfigT
    rounds: list[RoundResult] = field(default_factory=list)
    exit_codes: list[int | None] = field(default_factory=list)

    def median(self, attr: str) -> float:
        """The median across rounds of one :class:`RoundResult` field."""
        return float(statistics.median(getattr(r, attr) for r in self.rounds))


def percentile(sorted_values: Sequence[int], pct: float) -> float:
    """Nearest rank: always a value that was actually observed."""
    rank = max(1, math.ceil(pct / 100 * len(sorted_values)))
    return float(sorted_values[rank - 1])


def round_result(samples: list[int], operations: int, elapsed_ns: int, cpu_ns: Sequence[float] = ()) -> RoundResult:
    """Percentiles of latency ``samples`` (nanoseconds; sorted in place) and ``operations`` in ``elapsed_ns``;
    ``cpu_ns``: CPU nanoseconds in that time, as ``RoundResult``'s CPU fields (own, server, client)."""
    samples.sort()
    per_op = [ns / operations / 1000 for ns in cpu_ns]
    return RoundResult(
        p50_us=percentile(samples, 50) / 1000,
        p90_us=percentile(samples, 90) / 1000,
        p99_us=percentile(samples, 99) / 1000,
        rate_per_s=operations / (elapsed_ns / 1e9),
        **dict(zip(("cpu_us", "server_cpu_us", "client_cpu_us"), per_op, strict=False)),
    )


def cpu_ns(pid: int) -> float:
    """CPU nanoseconds the threads of process ``pid`` now alive have run (not its children's):
    the scheduler's own count (``/proc/PID/task/*/schedstat``), finer than the 10 ms ticks of
    ``/proc/PID/stat``. NaN where there is no such file (not Linux, or the process has gone)."""
    total = 0
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return math.nan
    for task in tasks:
        try:
            with open(f"/proc/{pid}/task/{task}/schedstat", encoding="ascii") as stat:
                total += int(stat.read().split()[0])
        except (OSError, ValueError, IndexError):
            continue  # a thread that ended meanwhile
    return float(total)


def cpu_cell(value: float) -> str:
    return "n/a" if math.isnan(value) else f"{value:.1f}"


def split(total: int, parts: int) -> list[int]:
    """``total`` as ``parts`` near-equal positive sizes."""
    parts = max(1, min(parts, total))
    return [total // parts + (1 if i < total % parts else 0) for i in range(parts)]


def rotated(count: int, shift: int) -> list[int]:
    """``range(count)`` rotated by ``shift``: no configuration is always measured first (or last) in a block."""
    shift %= count
    return [*range(shift, count), *range(shift)]


# --------------------------------------------------------------------------- report


def format_text_table(header: list[str], rows: list[list[str]]) -> str:
    """A plain-text table: first column left-aligned, the others right-aligned."""
    widths = [max(len(cell) for cell in column) for column in zip(header, *rows, strict=True)]
    lines = []
    for index, row in enumerate([header, *rows]):
        cells = [row[0].ljust(widths[0])] + [cell.rjust(w) for cell, w in zip(row[1:], widths[1:], strict=True)]
        lines.append("  ".join(cells))
        if index == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def format_markdown_table(header: list[str], rows: list[list[str]]) -> str:
    """A Markdown table: first column left-aligned, the others right-aligned."""
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(["---"] + ["---:"] * (len(header) - 1)) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def display_path(path: str | Path) -> str:
    """``path`` relative to the cwd when it is below it: the report's commands are meant to run from the repo root."""
    text = str(path)
    with contextlib.suppress(ValueError):
        rel = os.path.relpath(text, Path.cwd())
        if not rel.startswith(".."):
            return rel
    return text


def command_line() -> str:
    """How this run was started, as a shell command."""
    return shlex.join([display_path(sys.executable), display_path(sys.argv[0]), *sys.argv[1:]])


def machine() -> str:
    uname = os.uname()
    return (
        f"{os.cpu_count()} CPUs (nproc {len(os.sched_getaffinity(0))}), "
        f"Python {platform.python_version()} ({platform.python_implementation()}), {uname.sysname} {uname.release}"
    )


def load_average() -> str:
    """Other work on the machine changes wake-up costs a lot; the report should show how busy it was."""
    one, five, fifteen = os.getloadavg()
    return f"{one:.2f} {five:.2f} {fifteen:.2f}"


def print_results(
    summaries: Sequence[Summary[ConfigT]],
    table: tuple[list[str], list[list[str]]],
    notes: list[str],
    stopped_by: str,
    load_at_start: str,
) -> tuple[str, str]:
    """The report on stdout: the table, the ``notes`` (ratios), odd exit codes and the machine.

    ``stopped_by`` says how children were asked to leave (for the exit-code warning). Returns the load
    averages at start and now, for the Markdown report.
    """
    print()
    print(format_text_table(*table))
    print()
    for line in notes:
        print(line)
    for s in summaries:
        if any(code != 0 for code in s.exit_codes):
            # Not fatal for the figures, but a clean stop should end every transport with 0.
            print(f"warning: {s.config.name} exit codes after {stopped_by}: {s.exit_codes} (None = had to be killed)")
    loads = (load_at_start, load_average())
    print(f"\nmachine: {machine()}; load average at start {loads[0]}, at end {loads[1]}")
    return loads


def run_facts(when: dt.datetime, loads: tuple[str, str], machine_note: str = "") -> list[str]:
    """The Markdown list of when, where and how a run was made."""
    facts = [
        f"- Date: {when.strftime('%Y-%m-%d %H:%M:%S %Z').strip()}",
        f"- Machine: {machine()}{machine_note}",
        f"- Load average (1/5/15 min) at start: {loads[0]}; at end: {loads[1]}",
        f"- Command: `{command_line()}`",
    ]
    # Only the load at the start says whether other work was running: the load at the end counts the
    # benchmark's own processes (with 8 HTTP clients, a server and a proxy on 2 CPUs it reaches ~3 alone).
    before = float(loads[0].split()[0])
    cpus = os.cpu_count() or 1
    if before > cpus:
        facts.append(
            f"- **A busy machine**: a load of {before:.1f} on {cpus} CPUs before this benchmark began (other"
            " work was running). Every figure here is inflated by waiting for a CPU; only the interleaved"
            " ratios say something, and they too move from run to run."
        )
    return facts


def write_keeping_http_block(path: Path, text: str) -> None:
    """Write ``text`` as the whole of ``path``, except that the HTTP block (from its begin marker on) stays."""
    path.parent.mkdir(parents=True, exist_ok=True)
    old = path.read_text(encoding="utf-8") if path.exists() else ""
    begin = old.find(HTTP_BLOCK_BEGIN)
    if begin >= 0:
        text = text + "\n" + old[begin:]
    path.write_text(text, encoding="utf-8")


def write_http_block(path: Path, block: str) -> None:
    """Replace the HTTP block of ``path`` (append it when absent); every other byte stays as it was."""
    write_block(path, "http-benchmark", block)


def block_markers(name: str) -> tuple[str, str]:
    """The comments that open and close a generated block of a Markdown file."""
    return f"<!-- {name}:begin -->", f"<!-- {name}:end -->"


def write_block(path: Path, name: str, block: str) -> None:
    """Replace the block ``name`` of ``path`` with ``block`` (which carries its own markers), or append
    it when the file has none; every other byte of the file stays as it was."""
    begin_marker, end_marker = block_markers(name)
    text = path.read_text(encoding="utf-8") if path.exists() else ""
    begin = text.find(begin_marker)
    end = text.find(end_marker, begin + len(begin_marker)) if begin >= 0 else -1
    if begin >= 0 and end >= 0:
        text = text[:begin] + block + text[end + len(end_marker) :]
    else:
        if begin >= 0:
            print(f"warning: {path} has {begin_marker} but no {end_marker}: appending a new block", file=sys.stderr)
        separator = "" if not text else ("\n" if text.endswith("\n") else "\n\n")
        text = text + separator + block + "\n"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


def write_figures(
    path: Path,
    summaries: Sequence[Summary[ConfigT]],
    notes: Sequence[str],
    started: dt.datetime,
    loads: tuple[str, str],
    rounds: int,
) -> None:
    """A run's figures as JSON (``--json``): every configuration's medians, added over ``direct`` where
    it ran, and the ratio lines as printed (benchmarks/readme_figures.py puts them in the README)."""
    direct = next((s for s in summaries if s.config.name == "direct"), None)

    def added(summary: Summary[ConfigT], attr: str) -> float | None:
        return None if direct is None else round(summary.median(attr) - direct.median(attr), 1)

    def number(value: float) -> float | None:
        return None if math.isnan(value) else round(value, 1)

    document = {
        "date": started.isoformat(timespec="seconds"),
        "machine": machine(),
        "load_average": {"start": loads[0], "end": loads[1]},
        "command": command_line(),
        "rounds": rounds,
        "configs": [
            {
                "name": s.config.name,
                "p50_us": number(s.median("p50_us")),
                "p99_us": number(s.median("p99_us")),
                "added_p50_us": added(s, "p50_us"),
                "added_p99_us": added(s, "p99_us"),
                "rate_per_s": number(s.median("rate_per_s")),
                "cpu_us": number(s.median("cpu_us")),
            }
            for s in summaries
        ],
        "ratios": list(notes),
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")
