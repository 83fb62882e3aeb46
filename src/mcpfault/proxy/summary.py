"""The table of injected faults the proxy prints to stderr when it exits."""

from __future__ import annotations

from typing import Any, Protocol, TextIO

from mcpfault.faults.profile import Profile
from mcpfault.protocol.eras import EraTracker
from mcpfault.proxy.core import Stats


class Decider(Protocol):
    """An engine, or the engines of every HTTP session together."""

    @property
    def profile(self) -> Profile: ...

    def counters(self) -> list[tuple[str, int, int]]: ...


def _eras(total: int, modern: int, era: EraTracker) -> str:
    """Both eras when both were seen (an HTTP proxy serves clients of each), else the one."""
    if not total:
        return f"era {era.era.value}"
    if 0 < modern < total:
        return f"eras legacy {total - modern}, modern {modern}"
    return "era modern" if modern else f"era {era.era.value}"


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
    persistent = {rule.name for rule in engine.profile.rules if rule.fault.persistent}
    for (rule, type_name, mode), count in sorted(stats.faults.items()):
        seen = matched.get(rule, 0)
        if rule in persistent:
            # A drift stays in force from the call it first fired on: every later call is changed.
            share = f"in force from call {seen}" if seen else "-"
        else:
            share = f"{100 * count / seen:.0f}%" if seen else "-"
        table.add_row(rule, type_name, mode, str(count), share)
    if not stats.faults:
        table.add_row("(none)", "-", "-", "0", "-")
    console.print(table)
    received = ", ".join(f"{k} {v}" for k, v in sorted(stats.received.items()) if v)
    methods = ", ".join(f"{m} {c}" for m, c in stats.requests.most_common()) or "-"
    lines = [
        f"requests {total} ({methods}); {_eras(total, stats.modern_requests, era)}, protocol {version}",
        f"faulted requests: client received {received}" if received else "faulted requests: none",
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

    from mcpfault.proxy.process.supervisor import crash_causes, summary_lines

    table = Table(title="server process", title_justify="left")
    for column in ("generation", "crashes (by cause)", "restarts", "downtime total", "longest"):
        table.add_column(column, justify="right" if column != "crashes (by cause)" else "left")
    crashes = crash_causes(supervisor)
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
