"""The table of injected faults the proxy prints to stderr when it exits."""

from __future__ import annotations

from typing import Any, Protocol, TextIO

from mcpfault.faults.catalog import CATALOG
from mcpfault.faults.profile import Profile
from mcpfault.protocol.eras import EraTracker
from mcpfault.proxy.core import Stats


class Decider(Protocol):
    """An engine, or the engines of every HTTP session together."""

    @property
    def profile(self) -> Profile: ...

    def counters(self) -> list[tuple[str, int, int]]: ...


def render(stats: Stats, engine: Decider, era: EraTracker, out: TextIO, *, supervisor: Any = None) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console(file=out, width=None if out.isatty() else 110, highlight=False)
    total = sum(stats.requests.values())
    version = era.protocol_version or "unknown"
    table = Table(title=f"mcpfault: profile {engine.profile.name!r} (seed {engine.profile.seed})", title_justify="left")
    table.add_column("rule")
    table.add_column("type")
    table.add_column("mode")
    table.add_column("injected", justify="right")
    table.add_column("share of matched", justify="right")
    matched = {name: count for name, count, _ in engine.counters()}
    for (rule, type_name, mode), count in sorted(stats.faults.items()):
        seen = matched.get(rule, 0)
        fault_type = CATALOG.get(type_name)
        # A persistent fault applies to every call once in force: a share of matched would mislead.
        share = f"{100 * count / seen:.0f}%" if seen and fault_type is not None and not fault_type.persistent else "-"
        table.add_row(rule, type_name, mode, str(count), share)
    if not stats.faults:
        table.add_row("(none)", "-", "-", "0", "-")
    console.print(table)
    received = ", ".join(f"{k} {v}" for k, v in sorted(stats.received.items())) or "-"
    methods = ", ".join(f"{m} {c}" for m, c in stats.requests.most_common()) or "-"
    lines = [
        f"requests {total} ({methods}); era {era.era.value}, protocol {version}",
        f"faulted requests: client received {received}",
    ]
    if stats.opaque:
        lines.append("unparsable lines relayed untouched: " + ", ".join(f"{d} {n}" for d, n in stats.opaque.items()))
    if stats.upstream_exit_code is not None:
        lines.append(
            f"upstream exited with status {stats.upstream_exit_code}; "
            f"{stats.unanswered_at_exit} request(s) answered with an 'upstream exited' error"
        )
    for line in lines:
        console.print(line)
    if supervisor is not None and (supervisor.settings.restart != "never" or supervisor.crashes):
        _render_server(console, supervisor)


def _render_server(console: Any, supervisor: Any) -> None:
    """The supervised server: generations, crashes by cause, restarts, downtime."""
    from rich.table import Table

    from mcpfault.proxy.supervisor import summary_lines

    table = Table(title="server process", title_justify="left")
    for column in ("generation", "crashes (by cause)", "restarts", "downtime total", "longest"):
        table.add_column(column, justify="right" if column != "crashes (by cause)" else "left")
    crashes = ", ".join(f"{cause} {n}" for cause, n in sorted(supervisor.crashes.items())) or "0"
    downtimes = supervisor.downtimes_s
    table.add_row(
        str(supervisor.generation),
        crashes,
        str(supervisor.restarts),
        f"{sum(downtimes):.3f}s",
        f"{max(downtimes, default=0.0):.3f}s",
    )
    console.print(table)
    for line in summary_lines(supervisor):
        console.print(line)
