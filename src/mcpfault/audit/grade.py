"""The grades: from what each call of a tool was seen to do, to its findings. Pure functions over data.

- ``readOnlyHint`` true, and a call had effects: **lying** (high).
- ``idempotentHint`` true, and the retry after a lost reply added effects: **not idempotent** (high).
- ``destructiveHint`` false, and effects outside the work directory: **flagged** (medium).
- Retry-safe: ``yes`` (the retry added nothing), ``no``, ``only-with-key`` (a retry with the same
  idempotency key added nothing, one without did), ``unknown`` (nothing could tell).
- Not retry-safe without claiming otherwise (low), an unsatisfiable schema (low), a call that failed
  or that nothing could observe (info): reported, so a person sees what was not judged.

"Added effects", per observer: the state probe's answer changed between after the lost call and
after the retry; the eBPF probe saw the retry append to a file (``O_APPEND``). The eBPF probe that
sees the retry write in other ways (rewrite a file, connect, run a program) cannot tell whether the
result differs: that is ``unknown`` unless a state probe says.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from mcpfault.audit.plan import LOST, PLAIN, RETRY, RETRY_KEYED, SEVERITIES, ToolPlan

Verdict = Literal["added", "none", "unknown"]
RetrySafe = Literal["yes", "no", "only-with-key", "unknown"]
OUTSIDE_CATEGORIES = frozenset(
    {
        "runtime.fs_write",
        "runtime.fs_delete",
        "runtime.fs_chmod",
        "runtime.fs_mkdir",
        "runtime.fs_rename",
        "runtime.fs_symlink",
        "runtime.fs_link",
    }
)


@dataclass(frozen=True, slots=True)
class ProbeSeen:
    """What the eBPF (or fake) probe reported for one call window."""

    side_effects: tuple[dict[str, Any], ...] = ()  # {"type", "detail"}: exact, this call's own
    findings: tuple[dict[str, Any], ...] = ()  # {"category", "severity", "detail"} by the policy
    confirmed: bool = False  # the sidecar confirmed the window: an empty list means nothing happened
    acted: str | None = None  # for a lost reply: "true", "false" or "unknown"


@dataclass(frozen=True, slots=True)
class Observation:
    """One tools/call of the audited tool, and what was seen of it."""

    step: str  # plan.PLAIN, LOST, ...
    number: int  # the session's n-th tools/call (the probe's call id is "n:<JSON-RPC id>")
    arguments: dict[str, Any]
    ok: bool  # an answer that is not an error (a lost reply: the expected timeout or restart error)
    error: str | None = None
    span_id: str | None = None
    trace_id: str | None = None
    probe: ProbeSeen | None = None
    diff: tuple[str, ...] | None = None  # the state probe's answer before vs after (None: no state probe)
    state_error: str | None = None

    @property
    def probe_effects(self) -> bool:
        return bool(self.probe and self.probe.side_effects)

    @property
    def effects(self) -> bool:
        return self.probe_effects or bool(self.diff)

    def evidence(self) -> dict[str, Any]:
        """The call's evidence, as audit.json and the table give it."""
        record: dict[str, Any] = {"call": self.step, "call_number": self.number, "span_id": self.span_id}
        if self.probe is not None:
            record["side_effects"] = list(self.probe.side_effects)
            outside = [f for f in self.probe.findings if f.get("category") in OUTSIDE_CATEGORIES]
            if outside:
                record["outside_workdir"] = outside
        if self.diff:
            record["diff"] = list(self.diff)
        return record


@dataclass(frozen=True, slots=True)
class Finding:
    kind: str  # lying, not_idempotent, flagged, not_retry_safe, unsatisfiable_schema, call_failed, not_observed
    severity: str  # one of plan.SEVERITIES
    message: str
    evidence: tuple[dict[str, Any], ...] = ()


@dataclass(frozen=True, slots=True)
class Grade:
    effects_seen: bool | None  # None: nothing could observe
    outside_workdir: bool
    retry_safe: RetrySafe | None  # None: the tool was not called
    findings: tuple[Finding, ...] = field(default_factory=tuple)


def retry_verdict(retry: Observation | None, *, state: bool) -> Verdict:
    """Whether the retry added effects, from each observer: any "added" wins, then any "none"."""
    if retry is None:
        return "unknown"
    verdicts: list[Verdict] = []
    if state:
        verdicts.append("unknown" if retry.diff is None else ("added" if retry.diff else "none"))
    if retry.probe is not None:
        verdicts.append(_probe_verdict(retry.probe))
    if "added" in verdicts:
        return "added"
    return "none" if "none" in verdicts else "unknown"


def _probe_verdict(seen: ProbeSeen) -> Verdict:
    if not seen.side_effects:
        return "none" if seen.confirmed else "unknown"
    if any(e.get("type") == "file_open" and "O_APPEND" in str(e.get("detail", "")) for e in seen.side_effects):
        return "added"
    return "unknown"


def grade(plan: ToolPlan, calls: Sequence[Observation], *, observed: bool, state: bool) -> Grade:
    """The tool's grade. ``observed``: some observer ran (a probe or a state probe); ``state``: a state probe."""
    findings: list[Finding] = []
    if plan.unsatisfiable is not None:
        findings.append(
            Finding("unsatisfiable_schema", "low", f"no arguments satisfy the input schema: {plan.unsatisfiable}")
        )
    if not calls:
        return Grade(None, False, None, tuple(findings))
    by_step = {call.step: call for call in calls}
    failed = [c for c in calls if not c.ok]  # a lost call is ok when its reply was lost, as planned
    if failed:
        first = failed[0]
        findings.append(
            Finding("call_failed", "info", f"the {first.step} call failed: {first.error}", (first.evidence(),))
        )
    if not observed:
        findings.append(
            Finding("not_observed", "info", "nothing observed the calls: give --probe ebpf or a state probe")
        )
        return Grade(None, False, "unknown", tuple(findings))
    acting = [c for c in calls if c.effects]
    outside = [c for c in calls if c.probe and any(f.get("category") in OUTSIDE_CATEGORIES for f in c.probe.findings)]
    if plan.hints.read_only is True and acting:
        findings.append(
            Finding(
                "lying",
                "high",
                f"claims readOnlyHint, but {len(acting)} of its {len(calls)} calls had effects",
                tuple(c.evidence() for c in acting),
            )
        )
    plain = retry_verdict(by_step.get(RETRY), state=state)
    keyed = retry_verdict(by_step.get(RETRY_KEYED), state=state) if RETRY_KEYED in by_step else None
    safe: RetrySafe
    if plain == "none":
        safe = "yes"
    elif plain == "added":
        safe = "only-with-key" if keyed == "none" else "no"
    else:
        safe = "only-with-key" if keyed == "none" else "unknown"
    retry = by_step.get(RETRY)
    if plain == "added" and retry is not None:
        evidence = tuple(c.evidence() for c in (by_step.get(LOST), retry) if c is not None)
        if plan.hints.idempotent is True:
            findings.append(
                Finding(
                    "not_idempotent",
                    "high",
                    "claims idempotentHint, but the retry after a lost reply added effects",
                    evidence,
                )
            )
        elif safe == "no":
            findings.append(Finding("not_retry_safe", "low", "a retry after a lost reply adds effects", evidence))
    if plan.hints.destructive is False and outside:
        findings.append(
            Finding(
                "flagged",
                "medium",
                "claims destructiveHint false, but had effects outside the work directory",
                tuple(c.evidence() for c in outside),
            )
        )
    effects_seen = bool(acting) or None if not any(c.probe or c.diff is not None for c in calls) else bool(acting)
    return Grade(effects_seen, bool(outside), safe, tuple(findings))


def at_or_above(findings: Sequence[Finding], fail_on: str) -> list[Finding]:
    """The findings at or above ``fail_on`` (``never``: none)."""
    if fail_on == "never":
        return []
    floor = SEVERITIES.index(fail_on)
    return [f for f in findings if SEVERITIES.index(f.severity) >= floor]


__all__ = ["PLAIN", "Finding", "Grade", "Observation", "ProbeSeen", "at_or_above", "grade", "retry_verdict"]
