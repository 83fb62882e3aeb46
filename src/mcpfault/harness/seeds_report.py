"""The report's section across seeds (bench --seeds N): a column per seed, the spread beside the rate."""

from __future__ import annotations

from collections.abc import Collection, Sequence

from mcpfault.analysis.records import TaskRecord
from mcpfault.analysis.seeds import seed_spreads, seeds_of
from mcpfault.harness.formatting import md, md_table, percent


def seeds_section(records: Sequence[TaskRecord], fixed_rows: Collection[str]) -> list[str]:
    """Left out with one seed. ``fixed_rows``: rows whose profile has nothing random in it, marked so."""
    seeds = seeds_of(records)
    if len(seeds) < 2:
        return []
    rows = []
    for spread in seed_spreads(records):
        by_seed = {rate.seed: rate for rate in spread.rates}
        rows.append(
            [
                md(spread.row),
                md(spread.agent),
                *(percent(by_seed[s].correct, by_seed[s].tasks) if s in by_seed else "-" for s in seeds),
                percent(spread.correct, spread.tasks),
                f"{round(100 * spread.spread)} pp",
                "fixed" if spread.row in fixed_rows else "sampled",
            ]
        )
    header = ["profile", "agent", *(f"seed {s}" for s in seeds), "all seeds", "spread", "faults"]
    return [
        "## Across seeds",
        "",
        f"The matrix ran under {len(seeds)} seeds ({', '.join(map(str, seeds))}); each seed draws its own world, "
        "task plan and faults. Each cell: the correct share (success + recovered) under every seed, over all "
        "seeds, and the spread: the highest seed's share minus the lowest's, in percentage points. A rate "
        "whose spread is wide holds for the seed it was measured under, not in general. `fixed`: the "
        "profile has nothing random in it (every rule certain, no jitter, no mode drawn): its faults are the "
        "same under every seed, only the tasks differ, so its rows are one scenario, not a sample, and have "
        "no interval.",
        "",
        *md_table(header, rows, 2),
    ]
