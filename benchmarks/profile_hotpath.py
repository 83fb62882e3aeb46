"""Where does the proxy's time go? Sample ``mcpfault proxy`` with py-spy under the benchmark's load.

For each configuration (a proxy command, as ``stdio_overhead.py --config`` takes it) this starts the
command, warms it up, attaches ``py-spy record`` (raw collapsed stacks), drives it like the benchmark
does (``--calls`` sequential echo round trips, then a pipelined burst of ``--burst``), then prints

- the proxy's CPU time per request (user + system, from /proc, not from sampling);
- the top functions by self time and by inclusive time, in microseconds per request and in percent
  of the samples (py-spy counts only threads that are running, not those waiting in poll).

Needs py-spy (``.venv/bin/pip install py-spy``); it is not a dependency of mcpfault. Run from the
repository root::

    .venv/bin/python benchmarks/profile_hotpath.py \\
        --config "untraced=.venv/bin/python -m mcpfault proxy --config profiles/baseline.toml --no-summary \\
                  -- .venv/bin/python benchmarks/echo_server.py"

Only pipes to local child processes; every read has a deadline (see ``stdio_overhead.py``).
"""

from __future__ import annotations

import argparse
import collections
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import stdio_overhead as bench  # noqa: E402 - a sibling script, not a package
from common import BenchError, Config, parse_extra_config  # noqa: E402 - likewise

TICKS = os.sysconf("SC_CLK_TCK")


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS  # utime, stime (fields 14 and 15 of stat)


def _frame_name(frame: str) -> str:
    # "function (path/to/file.py:123)" -> "function (file.py)": lines would split one function apart.
    name, _, where = frame.partition(" (")
    file = where.rsplit(":", 1)[0].rsplit("/", 1)[-1]
    return f"{name} ({file})" if file else name


def aggregate(raw: Path) -> tuple[int, collections.Counter[str], collections.Counter[str]]:
    total = 0
    own: collections.Counter[str] = collections.Counter()
    inclusive: collections.Counter[str] = collections.Counter()
    for line in raw.read_text(errors="replace").splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        frames = [_frame_name(f) for f in stack.split(";")]
        total += count
        own[frames[-1]] += count
        for name in set(frames):
            inclusive[name] += count
    return total, own, inclusive


def profile(config: Config, args: argparse.Namespace, out_dir: Path) -> None:
    raw = out_dir / f"{config.name}.txt"
    pyspy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    exit_codes: list[int | None] = []
    with bench.running(config, args.timeout, args.grace, exit_codes) as child:
        bench.handshake(child)
        bench.measure_latency(child, args.warmup, args.payload)
        # Attached after start-up and warm-up: only the steady state is sampled.
        command = [pyspy, "record", "--nonblocking", "-r", str(args.rate), "-f", "raw", "-o", str(raw)]
        sampler = subprocess.Popen(
            [*command, "-p", str(child.proc.pid)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        try:
            time.sleep(1.0)  # py-spy's attach
            cpu_before = _cpu_s(child.proc.pid)
            bench.measure_latency(child, args.calls, args.payload)
            bench.measure_burst(child, args.burst, args.payload)
            cpu = _cpu_s(child.proc.pid) - cpu_before
        finally:
            sampler.send_signal(signal.SIGINT)
            sampler.wait(timeout=args.grace)
    requests = args.calls + args.burst
    total, own, inclusive = aggregate(raw)
    per_sample_us = 1e6 / args.rate / requests
    print(f"\n## {config.name}\n")
    print(f"- command: `{' '.join(config.command)}`")
    print(f"- {requests:,} requests; proxy CPU (user+sys, all threads): {cpu * 1e6 / requests:.1f} us per request")
    print(f"- {total:,} samples at {args.rate}/s = {total * per_sample_us:.1f} us of running threads per request\n")
    for title, counter in (("self time", own), ("inclusive time", inclusive)):
        print(f"| function ({title}) | us/request | % of samples |\n|---|---:|---:|")
        for name, count in counter.most_common(args.top):
            print(f"| `{name}` | {count * per_sample_us:.1f} | {100 * count / total:.1f} |")
        print()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--config", dest="configs", action="append", required=True, type=parse_extra_config)
    parser.add_argument("--calls", type=int, default=20_000, help="sequential round trips (default 20000)")
    parser.add_argument("--burst", type=int, default=100_000, help="pipelined requests (default 100000)")
    parser.add_argument("--warmup", type=int, default=500)
    parser.add_argument("--rate", type=int, default=1000, help="py-spy samples per second (default 1000)")
    parser.add_argument("--top", type=int, default=15)
    parser.add_argument("--payload-bytes", type=int, default=64)
    parser.add_argument("--timeout", type=float, default=20.0)
    parser.add_argument("--grace", type=float, default=15.0)
    parser.add_argument("--out", type=Path, help="keep the raw stacks here (default: a temporary directory)")
    args = parser.parse_args(argv)
    args.payload = "x" * args.payload_bytes
    with tempfile.TemporaryDirectory() as temporary:
        out_dir = args.out or Path(temporary)
        out_dir.mkdir(parents=True, exist_ok=True)
        for config in args.configs:
            try:
                profile(config, args, out_dir)
            except BenchError as exc:
                print(f"profiling {config.name} failed: {exc}", file=sys.stderr)
                return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
