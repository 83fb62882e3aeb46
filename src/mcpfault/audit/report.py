"""The audit's output: ``audit.json`` (for CI), the per-tool table with its evidence, and the dry run's
plan. Everything written or printed goes through the project's redaction first (arguments from an
examples file, or a state probe's answer, may hold a token)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

from mcpfault.audit import plan as plans
from mcpfault.audit.runner import Result, ToolAudit
from mcpfault.telemetry.logging import redact_value
from mcpfault.telemetry.otel_env import redact_userinfo

FORMAT_VERSION = 1
MAX_EVIDENCE_SHOWN = 3  # per finding in the table; audit.json has all of it


def document(result: Result) -> dict[str, Any]:
    """The audit as audit.json holds it."""
    settings = result.settings
    doc: dict[str, Any] = {
        "mcpfault_audit": FORMAT_VERSION,
        "dry_run": result.dry_run,
        "server": {
            "command": list(settings.command) or None,
            "upstream": redact_userinfo(settings.upstream) if settings.upstream else None,
        },
        "seed": settings.seed,
        "lose": settings.lose,
        "observers": settings.observers,
        "workdir": str(result.workdir) if result.workdir else None,
        "fail_on": settings.fail_on,
        "bounds": {"max_calls": settings.max_calls, "max_time_s": settings.max_time_s},
        "calls_made": result.calls_made,
        "wall_s": round(result.wall_s, 3),
        "passed": result.exit_code == 0,
        "failing_findings": len(result.failing),
        "tools": [_redacted(_tool(audit)) for audit in result.tools],
    }
    if result.out is not None:
        doc["events"] = str(result.out / "events.jsonl")
        doc["spans"] = str(result.out / "spans.jsonl")
    return {key: value if key == "tools" else redact_value(value) for key, value in doc.items()}


def _redacted(tool: dict[str, Any]) -> dict[str, Any]:
    """A tool's record redacted piece by piece: its nesting is deeper than the redaction walks at once."""
    tool = {key: value if key in ("findings", "calls") else redact_value(value) for key, value in tool.items()}
    tool["calls"] = [redact_value(call) for call in tool["calls"]]
    tool["findings"] = [
        {
            **redact_value({k: v for k, v in f.items() if k != "evidence"}),
            "evidence": [redact_value(e) for e in f["evidence"]],
        }
        for f in tool.get("findings", [])
    ]
    return tool


def _tool(audit: ToolAudit) -> dict[str, Any]:
    plan = audit.plan
    record: dict[str, Any] = {
        "name": plan.name,
        "hints": plan.hints.as_dict(),
        "arguments": plan.arguments,
        "arguments_from": plan.source,
        "idempotency_key": plan.key_field,
        "steps": list(plan.steps),
        "not_called": audit.stopped or plan.skip,
    }
    if plan.unsatisfiable is not None:
        record["unsatisfiable"] = plan.unsatisfiable
    if audit.grade is not None:
        record.update(
            effects_seen=audit.grade.effects_seen,
            outside_workdir=audit.grade.outside_workdir,
            retry_safe=audit.grade.retry_safe,
            findings=[
                {"kind": f.kind, "severity": f.severity, "message": f.message, "evidence": list(f.evidence)}
                for f in audit.grade.findings
            ],
        )
    record["calls"] = [
        {
            "call": c.step,
            "call_number": c.number,
            "arguments": c.arguments,
            "ok": c.ok,
            "error": c.error,
            "span_id": c.span_id,
            "trace_id": c.trace_id,
            "side_effects": list(c.probe.side_effects) if c.probe is not None else None,
            "diff": list(c.diff) if c.diff is not None else None,
            "state_error": c.state_error,
        }
        for c in audit.calls
    ]
    return record


def write(result: Result, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(document(result), indent=2, sort_keys=False) + "\n", encoding="utf-8")
    return path


# -- for a person --------------------------------------------------------------------------------


def render_plan(result: Result, out: TextIO) -> None:
    """The dry run: what the audit would call, with which arguments, and what would observe it."""
    doc = document(result)
    settings = result.settings
    if result.dry_run:
        print("mcpfault audit: DRY RUN, nothing was called. Add --confirm to perform this plan.", file=out)
    else:
        print(f"mcpfault audit: the plan performed ({result.calls_made} tools/call requests)", file=out)
    print("Run it against staging, never against production data.", file=out)
    print(f"seed {settings.seed}; bounds: {settings.max_calls} calls, {settings.max_time_s:g} s", file=out)
    for audit, tool in zip(result.tools, doc["tools"], strict=True):
        lines = plans.describe(audit.plan, settings)
        if tool["arguments"] is not None:  # the redacted arguments, not the plan's own
            lines = [
                (
                    f"  arguments ({tool['arguments_from']}): {json.dumps(tool['arguments'], sort_keys=True)}"
                    if line.startswith("  arguments (")
                    else line
                )
                for line in lines
            ]
        for line in lines:
            print(line, file=out)


def render(result: Result, out: TextIO) -> None:
    """The table per tool, then each finding with its evidence."""
    from rich.console import Console
    from rich.table import Table

    doc = document(result)
    console = Console(file=out, width=None if out.isatty() else 140, highlight=False, markup=False)
    table = Table(title="mcpfault audit: tools", title_justify="left")
    for column in ("tool", "hints claimed", "effects seen", "retry-safe", "findings"):
        table.add_column(column)
    for tool in doc["tools"]:
        claimed = _claimed(tool["hints"])
        if tool.get("not_called") and not tool["calls"]:
            seen, safe = "not called", "-"
        else:
            effects = tool.get("effects_seen")
            seen = "unobserved" if effects is None else ("yes" if effects else "none")
            if tool.get("outside_workdir"):
                seen += " (outside workdir)"
            safe = str(tool.get("retry_safe"))
        kinds = [f"{f['kind']} ({f['severity']})" for f in tool.get("findings", [])]
        table.add_row(tool["name"], claimed, seen, safe, ", ".join(kinds) or "-")
    console.print(table)
    for tool in doc["tools"]:
        if tool.get("not_called"):
            said = "not called: " if not tool["calls"] else ""
            console.print(f"{tool['name']}: {said}{tool['not_called']}", soft_wrap=True)
        for finding in tool.get("findings", []):
            console.print(
                f"{tool['name']}: {finding['kind']} ({finding['severity']}): {finding['message']}", soft_wrap=True
            )
            for item in finding["evidence"][:MAX_EVIDENCE_SHOWN]:
                console.print("  " + _evidence_line(item), soft_wrap=True)
            if len(finding["evidence"]) > MAX_EVIDENCE_SHOWN:
                console.print(
                    f"  ... {len(finding['evidence']) - MAX_EVIDENCE_SHOWN} more in audit.json", soft_wrap=True
                )
    verdict = (
        "passed" if doc["passed"] else f"FAILED: {doc['failing_findings']} finding(s) at or above {doc['fail_on']}"
    )
    console.print(
        f"{doc['calls_made']} tools/call requests (state probe's included) in {doc['wall_s']:.1f} s; {verdict}"
    )


def _claimed(hints: dict[str, bool | None]) -> str:
    """The hints a tool states, in short: "readOnly, idempotent", "not destructive"; "-" for none."""
    said = [
        f"{'' if value else 'not '}{name.removesuffix('Hint')}" for name, value in hints.items() if value is not None
    ]
    return ", ".join(said) or "-"


def _evidence_line(item: dict[str, Any]) -> str:
    parts = [f"{item['call']} call #{item['call_number']}", f"span {item.get('span_id') or '?'}"]
    effects: Sequence[dict[str, Any]] = item.get("side_effects") or ()
    if effects:
        parts.append("side effects: " + "; ".join(f"{e['type']} {e['detail']}" for e in effects[:4]))
    outside = item.get("outside_workdir") or ()
    if outside:
        parts.append("outside the workdir: " + "; ".join(str(f["detail"]) for f in outside[:2]))
    if item.get("diff"):
        parts.append("state diff: " + " ".join(item["diff"][:6]))
    return ", ".join(parts)
