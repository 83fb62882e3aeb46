"""Peak and current RSS of `mcpfault proxy` after 10,000 and 100,000 calls (not a test: it prints figures).

Every call has different arguments, so anything kept per call (the stale cache, event buffers, span
queues) would grow with the count; bounded structures keep RSS flat between the two marks.
Pipelined in batches of 1,000 (the echo server answers each), loopback pipes only, bounded waits.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import select
import subprocess
import sys
import time
from pathlib import Path

from common import (  # sibling modules: benchmarks/ is sys.path[0] when this runs as a script
    block_markers,
    command_line,
    format_markdown_table,
    load_average,
    machine,
    write_block,
)

ROOT = Path(__file__).resolve().parent.parent
ECHO = [sys.executable, str(ROOT / "benchmarks" / "echo_server.py")]
BATCH = 1000


def status_kib(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"no {field} for {pid}")


def read_lines(fd: int, count: int, buffer: bytearray, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    seen = 0
    while seen < count:
        remaining = deadline - time.monotonic()
        if remaining <= 0 or not select.select([fd], [], [], remaining)[0]:
            raise TimeoutError(f"only {seen} of {count} answers in {timeout_s} s")
        chunk = os.read(fd, 1 << 20)
        if not chunk:
            raise EOFError("the proxy closed its stdout")
        buffer += chunk
        seen += chunk.count(b"\n")
    del buffer[: buffer.rfind(b"\n") + 1]


def measure(name: str, proxy_args: list[str], marks: list[int]) -> dict[str, object]:
    command = [sys.executable, "-m", "mcpfault", "proxy", "--no-summary", *proxy_args, "--", *ECHO]
    proc = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    assert proc.stdin is not None and proc.stdout is not None
    out_fd, buffer = proc.stdout.fileno(), bytearray()
    figures: dict[str, object] = {"config": name}
    try:
        init = {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": "2025-11-25"}}
        proc.stdin.write(json.dumps(init).encode() + b"\n")
        proc.stdin.flush()
        read_lines(out_fd, 1, buffer)
        sent = 0
        for mark in marks:
            while sent < mark:
                lines = b"".join(
                    json.dumps(
                        {
                            "jsonrpc": "2.0",
                            "id": sent + i + 1,
                            "method": "tools/call",
                            "params": {"name": "echo", "arguments": {"text": f"call {sent + i}"}},
                        }
                    ).encode()
                    + b"\n"
                    for i in range(BATCH)
                )
                proc.stdin.write(lines)
                proc.stdin.flush()
                read_lines(out_fd, BATCH, buffer)
                sent += BATCH
            time.sleep(0.5)  # let span writers drain before reading RSS
            figures[f"rss_mib_at_{mark}"] = round(status_kib(proc.pid, "VmRSS") / 1024, 1)
        figures["peak_mib"] = round(status_kib(proc.pid, "VmHWM") / 1024, 1)
    finally:
        proc.stdin.close()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    return figures


# The growth from the first mark to the last that issue 8 allows.
GROWTH_TARGET_MIB = 5.0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--marks", default="10000,100000", help="call counts at which RSS is read")
    parser.add_argument("--markdown", type=Path, metavar="FILE", help="replace the generated block of FILE")
    parser.add_argument("--json", type=Path, metavar="FILE", help="write the figures as JSON to FILE")
    args = parser.parse_args()
    marks = [int(m) for m in args.marks.split(",")]
    spans = "/tmp/mcpfault-memory-spans.jsonl"
    configs = {
        "baseline": ["--config", "profiles/baseline.toml"],
        "never_fire+stale cache": ["--config", "benchmarks/profiles/never_fire.toml"],
        "never_fire+stale cache, events, spans, metrics": [
            "--config",
            "benchmarks/profiles/never_fire.toml",
            "--events",
            "/tmp/mcpfault-memory-events.jsonl",
            "--spans",
            spans,
            "--metrics-addr",
            "127.0.0.1:19465",
        ],
    }
    started, load_at_start = dt.datetime.now(dt.UTC), load_average()
    header = ["config", *(f"RSS after {m:,} calls" for m in marks), "growth", "peak"]
    rows: list[list[str]] = []
    results: list[dict[str, object]] = []
    print("| " + " | ".join(header) + " |")
    print("|---|" + "---:|" * (len(marks) + 2))
    for name, proxy_args in configs.items():
        Path(spans).unlink(missing_ok=True)
        figures = measure(name, proxy_args, marks)
        values = [float(figures[f"rss_mib_at_{m}"]) for m in marks]  # type: ignore[arg-type]
        figures["growth_mib"] = round(values[-1] - values[0], 1)
        results.append(figures)
        rows.append(
            [name, *(f"{v} MiB" for v in values), f"{values[-1] - values[0]:+.1f} MiB", f"{figures['peak_mib']} MiB"]
        )
        print("| " + " | ".join(rows[-1]) + " |", flush=True)
    loads = (load_at_start, load_average())
    if args.json is not None:
        document = {
            "date": started.isoformat(timespec="seconds"),
            "machine": machine(),
            "load_average": {"start": loads[0], "end": loads[1]},
            "command": command_line(),
            "marks": marks,
            "growth_target_mib": GROWTH_TARGET_MIB,
            "configs": results,
        }
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")
    if args.markdown is not None:
        write_block(args.markdown, "memory", markdown_block(started, loads, marks, header, rows, results))
    return 0


def markdown_block(
    started: dt.datetime,
    loads: tuple[str, str],
    marks: list[int],
    header: list[str],
    rows: list[list[str]],
    results: list[dict[str, object]],
) -> str:
    """The generated part of docs/results/memory.md: when, where, the table and the target's verdict."""
    begin, end = block_markers("memory")
    worst = max(float(r["growth_mib"]) for r in results)  # type: ignore[arg-type]
    verdict = "met" if worst < GROWTH_TARGET_MIB else "MISSED"
    return "\n".join(
        [
            begin,
            "",
            f"- Date: {started:%Y-%m-%d %H:%M %Z}; machine: {machine()}",
            f"- Load average (1, 5, 15 min) at start {loads[0]}, at end {loads[1]}",
            f"- Command: `{command_line()}`",
            "",
            format_markdown_table(header, rows),
            "",
            f"Growth from {marks[0]:,} to {marks[-1]:,} calls: at most {worst:+.1f} MiB (target: under"
            f" {GROWTH_TARGET_MIB:g} MiB, {verdict}).",
            "",
            end,
        ]
    )


if __name__ == "__main__":
    raise SystemExit(main())
