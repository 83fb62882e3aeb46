"""Compare the judged outcomes of two bench runs, task by task: `compare_records.py A B`.

A and B are `records.jsonl` files (or references written by `bench_cpu.py --write-reference`,
gzipped or not). What is compared is what a seed fixes: each task's outcome and what the judge saw
(fault types and modes, attempts, retries, duplicates, the failure class and its detail). Timings
(`duration_s`, `recovery_s`) and trace ids differ from run to run and are left out. Exits 1 and
lists the first differences when any task differs, or when a task is in one file only.
"""

from __future__ import annotations

import argparse
import gzip
import json
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

KEY = ("profile", "agent", "session", "task_index")
COMPARED = ("task", "outcome", "fault_types", "fault_modes", "attempts", "retries", "duplicates", "failure", "detail")

Outcomes = dict[tuple[Any, ...], dict[str, Any]]


def _lines(path: Path) -> Iterator[str]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as lines:
        yield from lines


def read_outcomes(path: Path) -> Outcomes:
    """Each task's compared fields, by (profile, agent, session, task index)."""
    outcomes: Outcomes = {}
    for number, line in enumerate(_lines(path), 1):
        if not line.strip():
            continue
        row = json.loads(line)
        try:
            key = tuple(row[k] for k in KEY)
        except KeyError as exc:
            raise SystemExit(f"{path}:{number}: not a task record (no {exc})") from None
        outcomes[key] = {k: row.get(k) for k in COMPARED}
    return outcomes


def write_reference(records: Path, reference: Path) -> None:
    """The compared fields of every task of ``records``, sorted, gzipped when the name ends in .gz."""
    outcomes = read_outcomes(records)
    text = "".join(
        json.dumps({**dict(zip(KEY, key, strict=True)), **outcomes[key]}, separators=(",", ":")) + "\n"
        for key in sorted(outcomes)
    )
    reference.parent.mkdir(parents=True, exist_ok=True)
    if reference.suffix == ".gz":
        reference.write_bytes(gzip.compress(text.encode(), mtime=0))
    else:
        reference.write_text(text)


def compare(expected: Outcomes, actual: Outcomes) -> list[str]:
    """One line per task that differs (or is missing from either side); empty when they agree."""
    differences = []
    for key in sorted(expected.keys() | actual.keys()):
        if key not in actual:
            differences.append(f"{key}: only in the reference")
        elif key not in expected:
            differences.append(f"{key}: not in the reference")
        elif expected[key] != actual[key]:
            changed = {k: (expected[key][k], actual[key][k]) for k in COMPARED if expected[key][k] != actual[key][k]}
            differences.append(f"{key}: " + ", ".join(f"{k} {a!r} -> {b!r}" for k, (a, b) in changed.items()))
    return differences


def cell_counts(outcomes: Outcomes) -> Counter[tuple[str, str, str]]:
    """(profile, agent, outcome) -> tasks: the headline table's numbers."""
    return Counter((key[0], key[1], row["outcome"]) for key, row in outcomes.items())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("expected", type=Path)
    parser.add_argument("actual", type=Path)
    args = parser.parse_args()
    expected, actual = read_outcomes(args.expected), read_outcomes(args.actual)
    differences = compare(expected, actual)
    counts_a, counts_b = cell_counts(expected), cell_counts(actual)
    cells = sorted({k for k in counts_a.keys() | counts_b.keys() if counts_a[k] != counts_b[k]})
    for line in differences[:40]:
        print(line)
    for cell in cells:
        print(f"cell {cell[0]}/{cell[1]} {cell[2]}: {counts_a[cell]} -> {counts_b[cell]}")
    if differences:
        print(f"{len(differences)} of {len(expected.keys() | actual.keys())} tasks differ")
        return 1
    print(f"identical: {len(expected)} tasks, {len(counts_a)} (profile, agent, outcome) counts")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
