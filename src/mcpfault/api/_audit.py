"""``audit()``: ``mcpfault audit`` as a function. A dry run (the plan, nothing called) unless
``confirm=True``; tools annotated (or defaulted) destructive are called only with ``confirm_destructive``.
Run it against staging, never against production data."""

from __future__ import annotations

import io
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal


@dataclass(frozen=True, slots=True)
class AuditOutcome:
    """What an audit found. ``document`` is audit.json's content (also written to ``audit_json`` when
    the tools were called); ``plan`` the dry run's lines; ``exit_code`` 1 at or above ``fail_on``."""

    dry_run: bool
    passed: bool
    exit_code: int
    document: dict[str, Any]
    plan: list[str]
    audit_json: Path | None

    def tool(self, name: str) -> dict[str, Any]:
        """One tool's record in ``document`` (a KeyError names the tools there are)."""
        for record in self.document["tools"]:
            if record["name"] == name:
                found: dict[str, Any] = record
                return found
        raise KeyError(f"no tool {name!r} in the audit ({', '.join(t['name'] for t in self.document['tools'])})")


def audit(
    command: Sequence[str] | None = None,
    *,
    upstream: str | None = None,
    tools: Sequence[str] = ("*",),
    examples: str | os.PathLike[str] | None = None,
    seed: int = 0,
    probe: str | None = None,
    state_tool: str | None = None,
    state_args: Mapping[str, Any] | None = None,
    state_resource: str | None = None,
    lose: Literal["drop", "crash"] = "drop",
    confirm: bool = False,
    confirm_destructive: bool = False,
    workdir: str | os.PathLike[str] | None = None,
    out: str | os.PathLike[str] = "mcpfault-audit",
    fail_on: str = "medium",
    max_calls: int = 200,
    max_time_s: float = 600.0,
    call_timeout_s: float = 30.0,
    lost_wait_s: float = 3.0,
) -> AuditOutcome:
    """Audit the tools of the server ``command`` (an argv list) or at ``upstream`` (HTTP), as
    ``mcpfault audit`` does with the same options; UsageError / UpstreamError on bad input."""
    from mcpfault.audit import report, runner
    from mcpfault.audit.plan import Settings
    from mcpfault.errors import UsageError

    if isinstance(command, str):
        raise UsageError(f"command {command!r} is a string; give an argv list, e.g. ['python', '/abs/server.py']")
    settings = Settings(
        command=tuple(str(part) for part in command or ()),
        upstream=upstream,
        tools=tuple(tools),
        examples=Path(examples) if examples is not None else None,
        seed=int(seed),
        probe=probe,
        state_tool=state_tool,
        state_args=dict(state_args or {}),
        state_resource=state_resource,
        lose=lose,
        confirm=confirm,
        confirm_destructive=confirm_destructive,
        workdir=Path(workdir) if workdir is not None else None,
        out=Path(out),
        fail_on=fail_on,
        max_calls=max_calls,
        max_time_s=max_time_s,
        call_timeout_s=call_timeout_s,
        lost_wait_s=lost_wait_s,
    )
    result = runner.run(settings)
    written = report.write(result, result.out / "audit.json") if result.out is not None else None
    plan = io.StringIO()
    report.render_plan(result, plan)
    return AuditOutcome(
        dry_run=result.dry_run,
        passed=result.exit_code == 0,
        exit_code=result.exit_code,
        document=report.document(result),
        plan=plan.getvalue().splitlines(),
        audit_json=written,
    )
