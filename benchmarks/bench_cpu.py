"""CPU per task of `mcpfault bench`: user + system time of the whole process tree, and wall time.

Runs `mcpfault bench` (the default matrix unless arguments follow `--`) as a child process. Every
process the bench starts (a proxy per session, the proxy's mock server) is waited for by its parent,
so once the bench has exited, `getrusage(RUSAGE_CHILDREN)` here holds the CPU of the whole tree. The
bench process's own share is read inside it (an `atexit` hook writes its RUSAGE_SELF), so the report
splits the harness from the proxies and mock servers it started.

    .venv/bin/python benchmarks/bench_cpu.py                       # the default matrix, 3,000 tasks
    .venv/bin/python benchmarks/bench_cpu.py --runs 3 --markdown docs/results/bench-cpu.md
    .venv/bin/python benchmarks/bench_cpu.py --expect benchmarks/reference/default-seed0.jsonl.gz -- --jobs 4
    .venv/bin/python benchmarks/bench_cpu.py -- --profiles mixed,error --tasks 20

`--expect` compares every task's outcome (and what the judge saw: faults, attempts, retries,
duplicates, failure) with a reference written by `--write-reference`; a difference exits 1. On a
loaded machine a call can miss its 0.5 s deadline for want of CPU, which changes that task and, by
one extra request, the faults drawn for the rest of its session: compare on a quiet machine, or with
fewer `--jobs`. The committed reference (`benchmarks/reference/`) is the default matrix with the
current judge (`--jobs 4`, `--write-reference`), identical from the code before and after the mock
server's start-up changes; a change to the judge or the policies needs a new one.
Not a test: it prints figures and passes or fails only on `--expect`.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shlex
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from compare_records import compare, read_outcomes, write_reference

ROOT = Path(__file__).resolve().parent.parent
TARGET_MS_PER_TASK = 10.0  # issue 33: the default matrix's CPU per task, the whole process tree

# Imported by every Python process of the bench (through PYTHONPATH): at exit, it appends the process's
# own CPU to a log, so the total splits by role. A process killed by a signal leaves no line; what the
# lines miss shows as "not attributed".
_SITECUSTOMIZE = """
import atexit, os, sys
def _mcpfault_bench_cpu():
    import json, resource
    me = resource.getrusage(resource.RUSAGE_SELF)
    line = json.dumps({"argv": sys.argv[:2], "cpu_s": me.ru_utime + me.ru_stime}) + "\\n"
    fd = os.open(os.environ["MCPFAULT_BENCH_CPU_LOG"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)
if os.environ.get("MCPFAULT_BENCH_CPU_LOG"):
    atexit.register(_mcpfault_bench_cpu)
"""
ROLES = ("bench", "proxy", "mock-server")


def _role(argv: list[str]) -> str:
    """bench, proxy, mock-server (however it was started), or the script's name."""
    args = argv[1:]
    for role in ROLES:
        if role in args:
            return role
    name = (
        Path(argv[0]).parent.name if argv and argv[0].endswith("__main__.py") else Path(argv[0] if argv else "?").name
    )
    return "mock-server" if name == "mock" else name


@dataclass(frozen=True, slots=True)
class Run:
    tasks: int
    wall_s: float
    user_s: float  # the whole tree
    sys_s: float
    by_role: dict[str, tuple[int, float]]  # role -> (processes, CPU seconds), from the exit hook
    exit_code: int
    out: Path

    @property
    def cpu_s(self) -> float:
        return self.user_s + self.sys_s

    @property
    def ms_per_task(self) -> float:
        return 1000 * self.cpu_s / max(1, self.tasks)


def run_bench(bench_args: list[str], out: Path) -> Run:
    out.mkdir(parents=True, exist_ok=True)
    hook = out / "bench-cpu-hook"
    hook.mkdir(exist_ok=True)
    (hook / "sitecustomize.py").write_text(_SITECUSTOMIZE)
    log = out / "bench-cpu-processes.jsonl"
    log.unlink(missing_ok=True)
    path = os.pathsep.join(p for p in (str(hook), os.environ.get("PYTHONPATH", "")) if p)
    env = {**os.environ, "PYTHONPATH": path, "MCPFAULT_BENCH_CPU_LOG": str(log)}
    command = [sys.executable, "-m", "mcpfault", "bench", "--out", str(out), *bench_args]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.monotonic()
    # The bench's own output goes to a file: a progress bar is not a figure.
    with (out / "bench-cpu.log").open("wb") as output:
        code = subprocess.run(
            command, cwd=ROOT, env=env, stdout=output, stderr=subprocess.STDOUT, check=False
        ).returncode
    wall = time.monotonic() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    by_role: dict[str, tuple[int, float]] = {}
    if log.is_file():
        for line in log.read_text().splitlines():
            row = json.loads(line)
            role = _role(row["argv"])
            count, cpu = by_role.get(role, (0, 0.0))
            by_role[role] = (count + 1, cpu + row["cpu_s"])
    records = out / "records.jsonl"
    tasks = sum(1 for line in records.open() if line.strip()) if records.is_file() else 0
    return Run(
        tasks=tasks,
        wall_s=wall,
        user_s=after.ru_utime - before.ru_utime,
        sys_s=after.ru_stime - before.ru_stime,
        by_role=by_role,
        exit_code=code,
        out=out,
    )


def table(runs: list[Run]) -> str:
    roles = [r for r in ROLES if any(r in run.by_role for run in runs)]
    roles += sorted({r for run in runs for r in run.by_role} - set(roles))
    head = "| run | tasks | wall | CPU user | CPU sys | CPU total | CPU per task |"
    head += "".join(f" {role} |" for role in roles) + " not attributed |"
    lines = [head, "|" + "---:|" * (7 + len(roles) + 1)]
    for number, run in enumerate(runs, 1):
        cells = []
        for role in roles:
            count, cpu = run.by_role.get(role, (0, 0.0))
            cells.append(f"{cpu:.1f} s ({count}, {1000 * cpu / max(1, count):.0f} ms each)")
        attributed = sum(cpu for _, cpu in run.by_role.values())
        lines.append(
            f"| {number} | {run.tasks:,} | {run.wall_s:.1f} s | {run.user_s:.1f} s | {run.sys_s:.1f} s "
            f"| {run.cpu_s:.1f} s | {run.ms_per_task:.1f} ms | "
            + " | ".join(cells)
            + f" | {run.cpu_s - attributed:.1f} s |"
        )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog="Arguments after -- go to `mcpfault bench` (default: none, the default matrix).",
    )
    parser.add_argument("--runs", type=int, default=1, help="bench runs, one after another (1)")
    parser.add_argument("--out", type=Path, help="keep the bench output here (default: a temporary directory)")
    parser.add_argument("--markdown", type=Path, help="also write the table to this file")
    parser.add_argument("--json", type=Path, help="also write the figures as JSON to this file")
    parser.add_argument("--expect", type=Path, help="reference outcomes; exit 1 if any task differs")
    parser.add_argument("--write-reference", type=Path, help="write the first run's outcomes here as a reference")
    args, bench_args = parser.parse_known_args()
    if bench_args[:1] == ["--"]:
        bench_args = bench_args[1:]
    elif bench_args:
        parser.error(f"unknown arguments {bench_args}; put the bench's own after --")
    if args.runs < 1:
        parser.error("--runs: give at least 1")
    # The Makefile's BYTECODE step, before the first run and outside every run's figures: with
    # PYTHONDONTWRITEBYTECODE set, a module edited since the last compile would otherwise be compiled
    # again by every proxy and mock server (~2 ms of CPU a module), and counted as their cost.
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(ROOT / "src")], stdout=subprocess.DEVNULL, check=True)
    runs: list[Run] = []
    status = 0
    with tempfile.TemporaryDirectory(prefix="mcpfault-bench-cpu-") as scratch:
        base = args.out or Path(scratch)
        for number in range(args.runs):
            run = run_bench(bench_args, base / f"run{number + 1}")
            runs.append(run)
            print(
                f"run {number + 1}: {run.tasks} tasks, {run.cpu_s:.1f} CPU-s ({run.ms_per_task:.1f} ms/task), "
                f"wall {run.wall_s:.1f} s, exit {run.exit_code}",
                flush=True,
            )
            if run.exit_code != 0:
                print(f"  the bench exited {run.exit_code}; its output: {run.out / 'bench-cpu.log'}", file=sys.stderr)
                status = 1
            if args.expect is not None:
                differences = compare(read_outcomes(args.expect), read_outcomes(run.out / "records.jsonl"))
                if differences:
                    status = 1
                    print(f"  {len(differences)} tasks differ from {args.expect}:", file=sys.stderr)
                    for line in differences[:20]:
                        print(f"    {line}", file=sys.stderr)
                else:
                    print(f"  outcomes identical to {args.expect} ({run.tasks} tasks)")
        if args.write_reference is not None:
            write_reference(runs[0].out / "records.jsonl", args.write_reference)
            print(f"reference outcomes written to {args.write_reference}")
    text = table(runs)
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    machine = f"{os.cpu_count()} CPUs, Python {platform.python_version()}, {platform.system()} {platform.release()}"
    print(text)
    print(f"machine: {machine}; load average {load} at the end")
    command = shlex.join(["benchmarks/bench_cpu.py", *sys.argv[1:]])
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(figures(runs, command, machine, load), indent=2) + "\n", encoding="utf-8")
    if args.markdown is not None:
        args.markdown.write_text(
            "# CPU per task of `mcpfault bench`\n\n"
            f"Made by `{command}` on {time.strftime('%Y-%m-%d %H:%M %Z')}; {machine}; load average {load} "
            "(1, 5, 15 min) when it ended. CPU is user + system of the whole process tree (the bench, every "
            "proxy and mock server); the role columns are each process's own share, read at its exit, with "
            "(processes, CPU each); what they miss (interpreter teardown after the exit hooks) is not attributed.\n\n"
            + text
            + "\n"
        )
    return status


def figures(runs: list[Run], command: str, machine: str, load: str) -> dict[str, object]:
    """The runs' figures for --json (what benchmarks/readme_figures.py puts in the README)."""
    return {
        "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "machine": machine,
        "load_average_at_end": load,
        "command": command,
        "target_ms_per_task": TARGET_MS_PER_TASK,
        "runs": [
            {
                "tasks": run.tasks,
                "cpu_s": round(run.cpu_s, 2),
                "ms_per_task": round(run.ms_per_task, 3),  # as the table rounds it, not twice
                "wall_s": round(run.wall_s, 2),
                "exit_code": run.exit_code,
            }
            for run in runs
        ],
    }


if __name__ == "__main__":
    raise SystemExit(main())
