"""How numbers read in reports: percentages, durations."""

from __future__ import annotations

import math

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
    """A 95% interval in whole percent: low rounded down, high rounded up, so it never looks narrower."""
    low, high = bounds
    return f"{math.floor(100 * low + 1e-9)}-{math.ceil(100 * high - 1e-9)}%"


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
