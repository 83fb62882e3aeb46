"""What the session length does to the bench: the same tasks and profiles at several --session-tasks.

A rule's ``after`` and ``limit`` count calls per session (each session is a fresh proxy), so the
drift profiles, which rename from the 4th call of a session on, fire on almost every task of a long
session and on hardly any task of a session of one. This runs ``mcpfault bench`` once per length
and writes one table of the correct and silent shares per length (docs/results/session-length.md).

    python benchmarks/session_length.py --lengths 1,5,20 --tasks 20 --out docs/results/session-length.md
"""

from __future__ import annotations

import argparse
import shlex
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

from mcpfault.analysis.records import read_records
from mcpfault.analysis.summary import AGENT_ORDER, PROFILE_ORDER, ordered
from mcpfault.harness.formatting import percent
from mcpfault.harness.report import md_table


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lengths", default="1,5,20", help="comma-separated --session-tasks values (1,5,20)")
    parser.add_argument("--tasks", type=int, default=20, help="tasks per cell (20)")
    parser.add_argument("--profiles", default="drift_input,drift_output", help="profiles (drift_input,drift_output)")
    parser.add_argument("--agents", default="naive,retry-only,resilient", help="agents (the three scripted)")
    parser.add_argument("--jobs", type=int, default=4, help="sessions at a time (4)")
    parser.add_argument("--out", type=Path, help="write the Markdown table here (default: print it)")
    args = parser.parse_args()
    lengths = [int(n) for n in args.lengths.split(",") if n.strip()]
    shares: dict[tuple[str, str], dict[int, str]] = defaultdict(dict)
    broken: list[str] = []
    with tempfile.TemporaryDirectory(prefix="mcpfault-session-length-") as scratch:
        for length in lengths:
            out = Path(scratch) / f"n{length}"
            command = [sys.executable, "-m", "mcpfault", "bench", "--profiles", args.profiles]
            command += ["--agents", args.agents, "--tasks", str(args.tasks), "--session-tasks", str(length)]
            command += ["--jobs", str(args.jobs), "--out", str(out)]
            print(f"session length {length}: {shlex.join(command[1:])}", file=sys.stderr, flush=True)
            done = subprocess.run(command, check=False, capture_output=True, text=True, timeout=1800)
            if done.returncode not in (0, 1) or not (out / "records.jsonl").is_file():
                print(done.stderr, file=sys.stderr)
                return 1
            if done.returncode == 1:
                print(f"session length {length}: some sessions broke:\n{done.stderr}", file=sys.stderr)
                lines = [line for line in done.stderr.splitlines() if "broke" in line or "disagree" in line]
                broken += [f"sessions of {length}: {line.removeprefix('mcpfault bench: ')}" for line in lines]
            cells: dict[tuple[str, str], list[str]] = defaultdict(list)
            for record in read_records(out / "records.jsonl"):
                cells[record.profile, record.agent].append(record.outcome)
            for key, outcomes in cells.items():
                correct = sum(o in ("success", "recovered") for o in outcomes)
                silent = outcomes.count("failed_silent")
                judged = "" if len(outcomes) == args.tasks else f" of {len(outcomes)}"
                shares[key][length] = f"{percent(correct, len(outcomes))} ({percent(silent, len(outcomes))}){judged}"
    profile_order = ordered((p for p, _ in shares), PROFILE_ORDER)
    agent_order = ordered((a for _, a in shares), AGENT_ORDER)
    rows = [
        [p, a, *(shares[p, a].get(n, "-") for n in lengths)]
        for p in profile_order
        for a in agent_order
        if (p, a) in shares
    ]
    this = shlex.join(["python", "benchmarks/session_length.py", *sys.argv[1:]])
    text = "\n".join(
        [
            "# Session length and the drift rows",
            "",
            "Produced by (on a shared 2-CPU machine; the outcomes of the tasks judged do not depend on its load, "
            "only wall time does, but a session that cannot start within 15 s breaks, and is listed below):",
            "",
            "```sh",
            this,
            "```",
            "",
            f"The same {args.tasks} tasks per cell, run in sessions of each length (`bench --session-tasks N`). "
            "Each cell: correct (success + recovered) and, in parentheses, failed_silent, as shares of the cell's "
            "tasks. The drift profiles rename from the 4th call of every session on (`after = 3`), so the shorter "
            "the sessions, the more tasks run before the drift: the rows measure the session length as much as "
            "the agent. `docs/results/report.md` uses sessions of 20 tasks.",
            "",
            *md_table(["profile", "agent", *(f"sessions of {n}" for n in lengths)], rows, left_columns=2),
            "",
        ]
    )
    if broken:
        text += (
            f"\n{len(broken)} session(s) broke (their tasks are missing; a cell says `of N` when it judged "
            "fewer tasks than asked):\n\n" + "\n".join(f"- {line}" for line in broken) + "\n"
        )
    if args.out is not None:
        args.out.write_text(text, encoding="utf-8")
        print(f"wrote {args.out}", file=sys.stderr)
    else:
        print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
