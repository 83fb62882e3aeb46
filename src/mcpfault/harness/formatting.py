"""How numbers and cells read in reports: percentages, durations, GFM table cells and tables."""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence

from mcpfault.analysis.summary import CellSummary

# ---------------------------------------------------------------------------------------------
# Formatting shared by the Markdown, the SVG and the terminal


def percent(part: int, whole: int) -> str:
    """A whole-number percentage, rounded half up in exact integer arithmetic.

    A share that is neither none nor all never rounds to 0% or 100%: one silent failure in 300
    tasks reads "<1%", not "0%", because hiding it is exactly what this report must not do.
    """
    if whole <= 0:
        return "-"
    if part in (0, whole):
        return "0%" if part == 0 else "100%"
    rounded = (200 * part + whole) // (2 * whole)
    if rounded == 0:
        return "<1%"
    if rounded >= 100:
        return ">99%"
    return f"{rounded}%"


def interval(bounds: tuple[float, float]) -> str:
    """A 95% interval as its exact bounds to one decimal, each rounded to the nearest (98/100 reads
    ``93.0-99.4%``): whole percent rounded outward read wider than the interval is, unsaid."""
    low, high = bounds
    return f"{_tenths(100 * low)}-{_tenths(100 * high)}%"


def _tenths(value: float) -> str:
    # Half up, decided in tenths after a nudge below float noise (0.15 * 100 is 15.000000000000002).
    return f"{math.floor(10 * value + 0.5 + 1e-9) / 10:.1f}"


def success_cell(cell: CellSummary) -> str:
    return f"{percent(cell.correct, cell.tasks)} ({percent(cell.failed_silent, cell.tasks)})"


def milliseconds(seconds: float) -> str:
    ms = seconds * 1000
    if ms >= 100:
        return f"{ms:,.0f} ms"
    if ms >= 10:
        return f"{ms:.1f} ms"
    return f"{ms:.2f} ms"


def duration(seconds: float) -> str:
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, secs = divmod(round(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    clock = f"{hours} h {minutes:02d} min {secs:02d} s" if hours else f"{minutes} min {secs:02d} s"
    return f"{seconds:.1f} s ({clock})"


_MD_SPECIAL = re.compile(r"([\\`*\[\]|])")


def md(text: str) -> str:
    """Text safe inside a GFM table cell.

    GitHub renders raw HTML, so <, > and & become entities; a bare | would split the cell. Underscores
    stay as they are: GFM ignores them inside words, and names like drift_input read better unescaped.
    """
    text = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return _MD_SPECIAL.sub(r"\\\1", text.replace("\n", " "))


def md_table(header: Sequence[str], rows: Iterable[Sequence[str]], left_columns: int = 1) -> list[str]:
    """A GFM table padded so the raw file reads as a table too; numbers right-aligned."""
    body = [list(row) for row in rows]
    widths = [max(3, len(header[i]), *(len(row[i]) for row in body)) for i in range(len(header))]

    def line(cells: Sequence[str]) -> str:
        padded = [
            c.ljust(w) if i < left_columns else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths, strict=True))
        ]
        return "| " + " | ".join(padded) + " |"

    rule = ["-" * w if i < left_columns else "-" * (w - 1) + ":" for i, w in enumerate(widths)]
    return [line(header), "| " + " | ".join(rule) + " |", *(line(row) for row in body)]
