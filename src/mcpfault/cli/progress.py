"""Progress of a long run: rich's bar on a terminal; plain lines elsewhere (CI logs, ``make run | tee``).

rich's bar draws nothing when stdout is not a terminal, so a bench read from a log would show no
sign of life for as long as it runs. There, a line goes to stderr every ``every_s`` seconds and at
the end: ``bench: 120/480 tasks, 12.3 s``.
"""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Callable, Iterator
from typing import IO, Any

PLAIN_EVERY_S = 5.0


class PlainProgress:
    """Counts finished items and prints a line when ``every_s`` has passed since the last one."""

    def __init__(
        self,
        label: str,
        total: int,
        *,
        out: IO[str],
        every_s: float = PLAIN_EVERY_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._label, self._total, self._out, self._every_s, self._clock = label, total, out, every_s, clock
        self._started = self._last = clock()
        self.done = 0

    def advance(self) -> None:
        self.done += 1
        now = self._clock()
        if now - self._last >= self._every_s and self.done < self._total:
            self._last = now
            self._line(now)

    def finish(self) -> None:
        self._line(self._clock())

    def _line(self, now: float) -> None:
        print(f"{self._label}: {self.done}/{self._total} tasks, {now - self._started:.1f} s", file=self._out)
        self._out.flush()


@contextlib.contextmanager
def progress(label: str, total: int, console: Any, *, unit: str = "tasks") -> Iterator[Callable[[], None]]:
    """A function to call once per finished task, for as long as the block runs."""
    if console.is_terminal:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        columns = (TextColumn(label), BarColumn(), MofNCompleteColumn(), TextColumn(unit), TimeElapsedColumn())
        with Progress(*columns, console=console, transient=True) as bar:
            task = bar.add_task(label, total=total)
            yield lambda: bar.advance(task)
        return
    plain = PlainProgress(label, total, out=sys.stderr)
    print(f"{label}: {total} tasks to run; a line every {PLAIN_EVERY_S:g} s", file=sys.stderr)
    yield plain.advance
    plain.finish()
