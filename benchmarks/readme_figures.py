"""The README's benchmark figures, from the JSON files `make bench` writes (not a benchmark itself).

Each benchmark of `make bench` writes its figures to docs/results/figures/ (`--json`) beside its Markdown
report; this script reads them and rewrites the block of README.md between `<!-- make-bench:begin -->`
and `<!-- make-bench:end -->`, so the front door quotes the last run and nothing older. Every line says
when its run was made and how busy the machine was; ratios are only ever taken within one run (each
benchmark's own JSON carries them).

Run: ``python benchmarks/readme_figures.py [--figures DIR] [--readme FILE]`` (what `make bench` does last).
A missing figures file is named in the block as not measured, and makes the exit status 1.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from common import block_markers, write_block  # a sibling module: benchmarks/ is sys.path[0] as a script

ROOT = Path(__file__).resolve().parent.parent
BLOCK = "make-bench"
# The file each part reads, in the order the block shows them.
FILES = ("stdio.json", "http.json", "memory.json", "scale.json", "bench-cpu.json")


def _when(figures: dict[str, Any]) -> str:
    """ "2026-12-06 05:10 UTC, load 0.6 at the start": when and how busy, from a run's own figures."""
    date = str(figures.get("date", "?")).replace("T", " ")[:16]
    load = figures.get("load_average") or {}
    start = str(load.get("start", "?")).split()[0] if isinstance(load, dict) else "?"
    return f"{date} UTC, load {start} at the start"


def _ratios(figures: dict[str, Any]) -> list[str]:
    """The run's lines about its open targets, as its benchmark printed them (each says met or missed);
    not those of issue 18, which issue 33's replaced (performance.md keeps them)."""
    return [
        f"  - {line}"
        for line in figures.get("ratios", [])
        if "target" in line and "(no target)" not in line and "issue 18's" not in line
    ]


def _added(figures: dict[str, Any], names: tuple[str, ...]) -> str:
    """``names``' added p50 over a direct call, those that ran, in that order."""
    by_name = {c["name"]: c for c in figures.get("configs", [])}
    shown = [by_name[n] for n in names if n in by_name and by_name[n].get("added_p50_us") is not None]
    return ", ".join(f"{c['name']} +{c['added_p50_us']:,.0f} us" for c in shown)


# The configurations the README names: the floors, the proxy, with spans, and the peer.
STDIO_SHOWN = ("relay", "parsing-relay", "mcpfault", "mcpfault-traced", "mcpfault-traced-metrics", "mcp-drill")
HTTP_SHOWN = ("relay", "relay-uvloop", "mcpfault", "mcpfault-spans", "mcpfault-spans-metrics")


def stdio(figures: dict[str, Any]) -> list[str]:
    return [
        f"- **stdio overhead** ([performance.md](docs/results/performance.md); {_when(figures)};"
        f" {figures.get('rounds', '?')} interleaved rounds): added p50 over a direct call:"
        f" {_added(figures, STDIO_SHOWN)}.",
        *_ratios(figures),
    ]


def http(figures: dict[str, Any]) -> list[str]:
    return [
        f"- **Streamable HTTP overhead** ([performance.md](docs/results/performance.md); {_when(figures)};"
        f" {figures.get('rounds', '?')} interleaved rounds): added p50 over a direct call:"
        f" {_added(figures, HTTP_SHOWN)}.",
        *_ratios(figures),
    ]


def memory(figures: dict[str, Any]) -> list[str]:
    marks = figures["marks"]
    rows = ", ".join(
        f"{c['config']} {c['growth_mib']:+.1f} MiB (to {c[f'rss_mib_at_{marks[-1]}']} MiB)" for c in figures["configs"]
    )
    worst = max(c["growth_mib"] for c in figures["configs"])
    target = figures["growth_target_mib"]
    verdict = "met" if worst < target else "**missed**"
    return [
        f"- **Memory** ([memory.md](docs/results/memory.md); {_when(figures)}): the proxy's RSS from"
        f" {marks[0]:,} to {marks[-1]:,} calls grows {rows} (target: under {target:g} MiB, {verdict})."
    ]


def scale(figures: dict[str, Any]) -> list[str]:
    burst = figures.get("burst") or {}
    churn = figures.get("churn_growth_kib")
    churned = (
        f"; {figures['churned']:,} sessions opened and ended after them grew RSS by {churn:+,} KiB" if churn else ""
    )
    return [
        f"- **Scale** ([scale.md](docs/results/scale.md); {_when(figures)}): {figures['sessions_opened']:,}"
        f" concurrent {figures['era']}-era sessions through one proxy, {figures['kib_per_session']:g} KiB each"
        f" ({figures['kib_per_session_high_water']:g} KiB at the high water), a call with all in flight"
        f" p50 {burst.get('p50_ms', 0):g} ms / p99 {burst.get('p99_ms', 0):g} ms, {figures['errors']:,}"
        f" errors{churned}."
    ]


def bench_cpu(figures: dict[str, Any]) -> list[str]:
    runs = figures["runs"]
    per_task = ", ".join(f"{r['ms_per_task']:.1f}" for r in runs)
    target = figures["target_ms_per_task"]
    verdict = "met" if max(r["ms_per_task"] for r in runs) <= target else "**missed**"
    date = str(figures["date"]).replace("T", " ")[:16]
    return [
        f"- **The bench's CPU** ([bench-cpu.md](docs/results/bench-cpu.md); {date} UTC, load"
        f" {str(figures['load_average_at_end']).split()[0]} at the end): {per_task} ms of CPU per task for"
        f" {runs[0]['tasks']:,} tasks of the default matrix, the whole process tree, {runs[0]['wall_s']:.1f} s"
        f" wall (target: at most {target:g} ms, {verdict})."
    ]


PARTS: dict[str, Callable[[dict[str, Any]], list[str]]] = {
    "stdio.json": stdio,
    "http.json": http,
    "memory.json": memory,
    "scale.json": scale,
    "bench-cpu.json": bench_cpu,
}


def block(figures_dir: Path) -> tuple[str, list[str]]:
    """The README block, and the figures files it had to go without."""
    missing: list[str] = []
    lines: list[str] = []
    for name in FILES:
        path = figures_dir / name
        if not path.is_file():
            missing.append(name)
            lines.append(f"- {name}: not measured yet (`make bench` writes it)")
            continue
        lines += PARTS[name](json.loads(path.read_text(encoding="utf-8")))
    begin, end = block_markers(BLOCK)
    shown = figures_dir.relative_to(ROOT) if figures_dir.is_relative_to(ROOT) else figures_dir
    intro = (
        f"Written by `make bench` from `{shown}/*.json` (`benchmarks/readme_figures.py`); ratios are within one run."
    )
    return "\n".join([begin, "", intro, "", *lines, "", end]), missing


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--figures", type=Path, default=ROOT / "docs" / "results" / "figures", help="the JSON files")
    parser.add_argument("--readme", type=Path, default=ROOT / "README.md", help="the file whose block is rewritten")
    args = parser.parse_args()
    text, missing = block(args.figures.resolve())
    write_block(args.readme, BLOCK, text)
    print(f"rewrote the {BLOCK} block of {args.readme}")
    for name in missing:
        print(f"not measured: {args.figures / name}", file=sys.stderr)
    return 1 if missing else 0


if __name__ == "__main__":
    raise SystemExit(main())
