"""What each cell of a bench met: faults injected, tasks touched and affected, and the rules that never fired.

A success rate means little without the exposure behind it: an agent that met no fault of a rule was
never tested by it (before the proxy listed tools itself, naive and retry-only met none of the
``read_only`` rules). The counts of tasks come from the records; which rule fired how often comes
from each session's proxy events (its ``rule`` field, and ``faults`` when several applied) and the
rule names from the profile copy each session keeps (``profile.toml``).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from mcpfault.analysis.records import TaskRecord
from mcpfault.harness.formatting import md, md_table
from mcpfault.proxy.events import read_events

Cell = tuple[str, str]  # (report row, agent)


@dataclass(frozen=True, slots=True)
class CellExposure:
    row: str
    agent: str
    tasks: int
    injected: int  # faults applied to the cell's task requests (every attempt's, each fault once)
    touched: int  # tasks a fault reached
    affected: int  # tasks a fault changed what the client received
    absorbed: int  # affected, right, and no agent action after the fault


def cell_exposure(records: Iterable[TaskRecord]) -> list[CellExposure]:
    """Per (row, agent), sorted so that the report is the same whatever the order of the records."""
    cells: dict[Cell, list[TaskRecord]] = {}
    for record in records:
        cells.setdefault((record.row, record.agent), []).append(record)
    return [
        CellExposure(
            row=row,
            agent=agent,
            tasks=len(found),
            injected=sum(len(r.fault_modes) for r in found),
            touched=sum(1 for r in found if r.fault_types),
            affected=sum(1 for r in found if r.affected_types),
            absorbed=sum(1 for r in found if r.absorbed),
        )
        for (row, agent), found in sorted(cells.items())
    ]


def rule_firings(sessions_dir: Path) -> dict[Cell, dict[str, int]]:
    """Per (row, agent): every rule of the cell's profile and how many requests it fired on, from the
    session directories under ``sessions_dir`` (a bench's ``sessions``). Empty when there are none."""
    from mcpfault.faults import profile as profiles
    from mcpfault.harness.session_judge import SESSION_FILE, SESSION_PROFILE

    firings: dict[Cell, dict[str, int]] = {}
    if not sessions_dir.is_dir():
        return firings
    for marker in sorted(sessions_dir.rglob(SESSION_FILE)):
        directory = marker.parent
        try:
            described = json.loads(marker.read_text(encoding="utf-8"))
            rules = [rule.name for rule in profiles.load(directory / SESSION_PROFILE).rules]
        except (OSError, ValueError) as exc:
            raise ValueError(f"{directory}: cannot tell which rules it ran ({exc})") from None
        transport = str(described.get("transport", "stdio"))
        name = str(described["profile_name"])
        row = name if transport == "stdio" else f"{name} ({transport})"
        counts = firings.setdefault((row, str(described["agent"])), dict.fromkeys(rules, 0))
        for event in read_events(directory / "events.jsonl"):
            applied = [f.get("rule") for f in event.get("faults") or ()] or [event.get("rule")]
            for rule in applied:
                if rule is not None:
                    counts[str(rule)] = counts.get(str(rule), 0) + 1
    return firings


def never_fired(firings: Mapping[Cell, Mapping[str, int]]) -> list[tuple[str, str, str]]:
    """(row, agent, rule) for every rule that fired 0 times in a cell."""
    return [(row, agent, rule) for (row, agent), counts in firings.items() for rule, n in counts.items() if n == 0]


def exposure_section(records: Sequence[TaskRecord], sessions_dir: Path | None) -> list[str]:
    """The report's exposure table, and a warning per rule that fired 0 times in a cell."""
    cells = cell_exposure(records)
    if not cells:
        return []
    firings = rule_firings(sessions_dir) if sessions_dir is not None else {}
    rows = [
        [
            md(c.row),
            md(c.agent),
            str(c.tasks),
            str(c.injected),
            str(c.touched),
            str(c.affected),
            str(c.absorbed),
            _fired(firings.get((c.row, c.agent))),
        ]
        for c in cells
    ]
    lines = [
        "## Exposure per cell",
        "",
        "What each cell met: `injected`, the faults applied to its tasks' requests (every attempt's); "
        "`touched`, the tasks a fault reached; `affected`, those a fault changed what the client received "
        "(analysis/effects.py); `absorbed`, affected tasks that ended right with no agent action after the "
        "fault (counted as success, not recovered); `rules fired`, each rule of the profile and the requests "
        "it fired on in the cell (all requests, tools/list and the handshake included).",
        "",
        *md_table(
            ["profile", "agent", "tasks", "injected", "touched", "affected", "absorbed", "rules fired"],
            rows,
            left_columns=2,
        ),
    ]
    silent = never_fired(firings)
    if silent:
        lines += ["", "**Warning: rules that never fired in a cell** (that cell tells nothing about them):", ""]
        lines += [f"- {md(row)} / {md(agent)}: `{md(rule)}` fired 0 times" for row, agent, rule in silent]
    elif sessions_dir is None or not firings:
        lines += ["", "Which rule fired how often is not known here (no session directories beside the records)."]
    return lines


def _fired(counts: Mapping[str, int] | None) -> str:
    if counts is None:
        return "?"
    return md(", ".join(f"{rule} {n}" for rule, n in counts.items())) or "-"
