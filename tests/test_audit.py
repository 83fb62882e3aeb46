"""`mcpfault audit`'s pure parts: the plan (arguments, skips), the grades, the settings' checks.
The end-to-end audits, against real servers, are in test_audit_e2e.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from mcpfault.audit import arguments as args_
from mcpfault.audit import grade as grades
from mcpfault.audit import plan as plans
from mcpfault.audit.grade import Observation, ProbeSeen
from mcpfault.audit.plan import Settings
from mcpfault.errors import UsageError

SERVER = ("python", "/srv/server.py")
APPEND = {"type": "file_open", "detail": "/w/notes.txt (O_WRONLY|O_CREAT|O_APPEND)"}
REWRITE = {"type": "file_open", "detail": "/w/settings.json (O_WRONLY|O_CREAT|O_TRUNC)"}
OUTSIDE = {"category": "runtime.fs_write", "severity": "high", "detail": "outside allowed paths: /etc/x"}
TOOLS: list[dict[str, Any]] = [
    {"name": "list_items", "inputSchema": {"type": "object"}, "annotations": {"readOnlyHint": True}},
    {
        "name": "add_item",
        "inputSchema": {
            "type": "object",
            "properties": {
                "title": {"type": "string", "minLength": 1},
                "count": {"type": "integer", "minimum": 1, "maximum": 9},
                "idempotencyKey": {"type": ["string", "null"]},
            },
            "required": ["title", "count"],
        },
        "annotations": {"destructiveHint": False},
    },
    {
        "name": "impossible",
        "inputSchema": {
            "type": "object",
            "properties": {"n": {"type": "integer", "minimum": 5, "maximum": 1}},
            "required": ["n"],
        },
        "annotations": {"readOnlyHint": True},
    },
    {"name": "drop_all", "inputSchema": {"type": "object"}},  # no annotations: destructive by MCP's default
]


def settings(**kw: Any) -> Settings:
    return Settings(command=SERVER, **kw)


def by_name(plan_list: list[plans.ToolPlan]) -> dict[str, plans.ToolPlan]:
    return {p.name: p for p in plan_list}


def test_the_same_seed_gives_the_same_arguments_and_another_seed_may_not() -> None:
    first = plans.tool_plans(TOOLS, settings(seed=11))
    assert first == plans.tool_plans(TOOLS, settings(seed=11))
    drawn = {plans.tool_plans(TOOLS, settings(seed=s))[1].arguments["title"] for s in range(8)}  # type: ignore[index]
    assert len(drawn) > 1, drawn
    add = by_name(first)["add_item"]
    assert add.arguments is not None and set(add.arguments) == {"title", "count"}  # the plain call has no key
    assert add.arguments["title"] and 1 <= add.arguments["count"] <= 9
    assert add.key_field == "idempotencyKey"
    assert add.keyed_arguments == {**add.arguments, "idempotencyKey": add.keyed_arguments["idempotencyKey"]}  # type: ignore[index]
    assert add.steps == (*plans.STEPS, *plans.KEYED_STEPS)


def test_a_tool_whose_seed_is_its_own_keeps_its_arguments_when_another_tool_is_added() -> None:
    alone = by_name(plans.tool_plans(TOOLS[1:2], settings(seed=3)))["add_item"]
    among = by_name(plans.tool_plans(TOOLS, settings(seed=3)))["add_item"]
    assert alone.arguments == among.arguments


def test_an_unsatisfiable_schema_is_reported_with_the_property_not_skipped_in_silence() -> None:
    impossible = by_name(plans.tool_plans(TOOLS, settings()))["impossible"]
    assert impossible.arguments is None and impossible.steps == ()
    assert impossible.unsatisfiable is not None and "n {" in impossible.unsatisfiable
    assert "--examples" in (impossible.skip or "")
    graded = grades.grade(impossible, [], observed=True, state=True)
    assert [f.kind for f in graded.findings] == ["unsatisfiable_schema"]
    assert "maximum" in graded.findings[0].message
    assert any("unsatisfiable" in line for line in plans.describe(impossible, settings()))


def test_destructive_tools_are_planned_but_not_called_without_confirm_destructive() -> None:
    plain = by_name(plans.tool_plans(TOOLS, settings()))
    assert plain["drop_all"].steps == () and "--confirm-destructive" in (plain["drop_all"].skip or "")
    assert plain["add_item"].steps  # destructiveHint false
    confirmed = by_name(plans.tool_plans(TOOLS, settings(confirm_destructive=True)))
    assert confirmed["drop_all"].steps == plans.STEPS


def test_the_state_tool_is_not_audited_and_tools_globs_select(tmp_path: Path) -> None:
    picked = plans.tool_plans(TOOLS, settings(state_tool="list_items", tools=("list_*", "add_*")))
    assert [p.name for p in picked] == ["list_items", "add_item"]
    assert picked[0].skip == "it is the state probe"
    with pytest.raises(UsageError, match=r"--tools nope\*: no tool of the server matches \(list_items, add_item"):
        plans.tool_plans(TOOLS, settings(tools=("nope*",)))
    with pytest.raises(UsageError, match="--state-tool 'gone': the server has no such tool"):
        plans.tool_plans(TOOLS, settings(state_tool="gone"))


def test_examples_take_precedence_and_bad_files_say_where(tmp_path: Path) -> None:
    good = tmp_path / "examples.toml"
    good.write_text('[tools.add_item.arguments]\ntitle = "mine"\ncount = 2\n[tools.impossible.arguments]\nn = 3\n')
    planned = by_name(plans.tool_plans(TOOLS, settings(examples=good)))
    assert planned["add_item"].arguments == {"title": "mine", "count": 2}
    assert planned["add_item"].source == "examples"
    assert planned["impossible"].arguments == {"n": 3} and planned["impossible"].unsatisfiable is None
    cases = {
        "[tools.ghost.arguments]\nx = 1\n": "the server has no tool 'ghost'",
        "[tools.add_item]\nargs = 1\n": r"\[tools.add_item\]: give only an 'arguments' table",
        "[other]\n": "unknown top-level key 'other'",
        "not toml ==": "not valid TOML",
    }
    for text, message in cases.items():
        bad = tmp_path / "bad.toml"
        bad.write_text(text)
        with pytest.raises(UsageError, match=message):
            plans.tool_plans(TOOLS, settings(examples=bad))
    with pytest.raises(UsageError, match="cannot read it"):
        plans.tool_plans(TOOLS, settings(examples=tmp_path / "missing.toml"))


@pytest.mark.parametrize(
    ("name", "spec", "found"),
    [
        ("idempotency_key", {"type": "string"}, True),
        ("idempotencyKey", {"type": ["string", "null"]}, True),
        ("request_id", {"anyOf": [{"type": "string"}, {"type": "null"}]}, True),
        ("client_token", {}, True),
        ("dedupe_key", {"type": "integer"}, False),
        ("title", {"type": "string"}, False),
    ],
)
def test_an_idempotency_key_is_found_by_its_name_and_a_string_type(
    name: str, spec: dict[str, Any], found: bool
) -> None:
    schema = {"type": "object", "properties": {name: spec}}
    assert args_.idempotency_key(schema) == (name if found else None)


def test_drawn_strings_are_printable() -> None:
    schema = {
        "type": "object",
        "properties": {"a": {"type": "string"}, "b": {"type": "string"}},
        "required": ["a", "b"],
    }
    for seed in range(10):
        values = args_.draw(schema, seed)
        assert all(v.isprintable() for v in values.values()), values


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"command": ()}, "give the server's command after '--', or --upstream URL"),
        ({"upstream": "ftp://x"}, "give an http:// or https:// URL"),
        ({"upstream": "http://127.0.0.1:1/mcp", "probe": "ebpf"}, "with --upstream use a state probe"),
        ({"upstream": "http://127.0.0.1:1/mcp", "lose": "crash"}, "with --upstream use --lose drop"),
        ({"probe": "strace"}, "give ebpf"),
        ({"state_tool": "a", "state_resource": "x://y"}, "not both"),
        ({"state_args": {"a": 1}}, "--state-args goes with --state-tool"),
        ({"fail_on": "severe"}, "--fail-on 'severe'"),
        ({"max_calls": 0}, "--max-calls 0: give 1 to"),
        ({"max_time_s": 0.0}, "--max-time-s 0"),
        ({"lost_wait_s": -1.0}, "--lost-wait-s -1"),
    ],
)
def test_settings_refuse_what_cannot_work_and_say_what_to_do(kw: dict[str, Any], message: str) -> None:
    values: dict[str, Any] = {"command": SERVER, **kw}
    if "upstream" in kw:
        values["command"] = ()
    with pytest.raises(UsageError, match=message):
        Settings(**values).check()


# -- grades ---------------------------------------------------------------------------------------


def call(
    step: str,
    number: int,
    *,
    effects: tuple[dict[str, Any], ...] = (),
    diff: tuple[str, ...] | None = None,
    findings: tuple[dict[str, Any], ...] = (),
    probe: bool = True,
    ok: bool = True,
) -> Observation:
    seen = ProbeSeen(side_effects=effects, findings=findings, confirmed=True) if probe else None
    return Observation(step, number, {}, ok, span_id=f"span{number}", probe=seen, diff=diff)


def plan_of(annotations: dict[str, Any], key: bool = False) -> plans.ToolPlan:
    tool = {"name": "t", "inputSchema": {"type": "object"}, "annotations": annotations}
    if key:
        tool["inputSchema"] = {"type": "object", "properties": {"idempotency_key": {"type": "string"}}}
    return plans.tool_plans([tool], settings(confirm_destructive=True))[0]


def test_an_idempotent_hint_whose_retry_appends_is_not_idempotent_with_the_write_as_evidence() -> None:
    plan = plan_of({"idempotentHint": True, "destructiveHint": False})
    calls = [
        call("plain", 1, effects=(APPEND,)),
        call("lost", 2, effects=(APPEND,)),
        call("retry", 3, effects=(APPEND,)),
    ]
    graded = grades.grade(plan, calls, observed=True, state=False)
    assert graded.retry_safe == "no"
    (finding,) = graded.findings
    assert finding.kind == "not_idempotent" and finding.severity == "high"
    assert [e["span_id"] for e in finding.evidence] == ["span2", "span3"]
    assert finding.evidence[1]["side_effects"] == [APPEND]


def test_a_read_only_hint_with_effects_is_lying() -> None:
    plan = plan_of({"readOnlyHint": True})
    calls = [call("plain", 1, effects=(REWRITE,)), call("lost", 2), call("retry", 3)]
    graded = grades.grade(plan, calls, observed=True, state=False)
    assert [f.kind for f in graded.findings] == ["lying"] and graded.retry_safe == "yes"
    assert graded.findings[0].evidence[0]["call"] == "plain"


def test_a_rewrite_is_retry_safe_when_the_state_probe_says_nothing_changed_and_unknown_without_it() -> None:
    plan = plan_of({"idempotentHint": True, "destructiveHint": False})
    by_probe = [
        call("plain", 1, effects=(REWRITE,)),
        call("lost", 2, effects=(REWRITE,)),
        call("retry", 3, effects=(REWRITE,)),
    ]
    assert grades.grade(plan, by_probe, observed=True, state=False).retry_safe == "unknown"
    both = [
        call("plain", 1, effects=(REWRITE,), diff=("+ x",)),
        call("lost", 2, effects=(REWRITE,), diff=()),
        call("retry", 3, effects=(REWRITE,), diff=()),
    ]
    graded = grades.grade(plan, both, observed=True, state=True)
    assert graded.retry_safe == "yes" and graded.findings == () and graded.effects_seen is True


def test_retry_safe_only_with_a_key_and_a_low_finding_for_an_honest_non_idempotent_tool() -> None:
    plan = plan_of({"destructiveHint": False}, key=True)
    assert plan.steps == (*plans.STEPS, *plans.KEYED_STEPS)
    calls = [
        call("plain", 1, diff=("+ a",), probe=False),
        call("lost", 2, diff=("+ a",), probe=False),
        call("retry", 3, diff=("+ a",), probe=False),
        call("lost-keyed", 4, diff=("+ a",), probe=False),
        call("retry-keyed", 5, diff=(), probe=False),
    ]
    graded = grades.grade(plan, calls, observed=True, state=True)
    assert graded.retry_safe == "only-with-key"
    assert [f.kind for f in graded.findings] == []  # only-with-key is the answer, not a finding
    no_key = grades.grade(plan, calls[:3], observed=True, state=True)
    assert no_key.retry_safe == "no" and [(f.kind, f.severity) for f in no_key.findings] == [("not_retry_safe", "low")]


def test_effects_outside_the_workdir_of_a_non_destructive_tool_are_flagged() -> None:
    plan = plan_of({"destructiveHint": False, "idempotentHint": True})
    calls = [call("plain", 1, effects=(REWRITE,), findings=(OUTSIDE,)), call("lost", 2), call("retry", 3)]
    graded = grades.grade(plan, calls, observed=True, state=False)
    assert [(f.kind, f.severity) for f in graded.findings] == [("flagged", "medium")]
    assert graded.outside_workdir and graded.findings[0].evidence[0]["outside_workdir"] == [OUTSIDE]


def test_nothing_observing_gives_unknown_and_says_so() -> None:
    plan = plan_of({"idempotentHint": True, "destructiveHint": False})
    calls = [call("plain", 1, probe=False), call("lost", 2, probe=False), call("retry", 3, probe=False)]
    graded = grades.grade(plan, calls, observed=False, state=False)
    assert graded.retry_safe == "unknown" and graded.effects_seen is None
    assert [f.kind for f in graded.findings] == ["not_observed"]


def test_fail_on_takes_the_findings_at_or_above_it() -> None:
    found = [grades.Finding("a", "low", ""), grades.Finding("b", "medium", ""), grades.Finding("c", "high", "")]
    assert [f.kind for f in grades.at_or_above(found, "medium")] == ["b", "c"]
    assert [f.kind for f in grades.at_or_above(found, "info")] == ["a", "b", "c"]
    assert grades.at_or_above(found, "never") == []


def test_a_reply_that_was_not_lost_and_a_failed_call_are_reported() -> None:
    plan = plan_of({"idempotentHint": True, "destructiveHint": False})
    not_lost = Observation(
        "lost", 2, {}, False, error="the reply was not lost (the server answered before the fault could act)"
    )
    calls = [call("plain", 1, diff=(), probe=False), not_lost, call("retry", 3, diff=(), probe=False)]
    graded = grades.grade(plan, calls, observed=True, state=True)
    assert [(f.kind, f.severity) for f in graded.findings] == [("call_failed", "info")]
    assert "the lost call failed: the reply was not lost" in graded.findings[0].message


def test_what_the_audit_writes_and_prints_is_redacted(tmp_path: Path) -> None:
    import io

    from mcpfault.audit import report
    from mcpfault.audit.runner import Result, ToolAudit

    examples = tmp_path / "examples.toml"
    secret = "sk-" + "a1b2c3d4e5f6g7h8i9j0k1l2"
    examples.write_text(f'[tools.add_item.arguments]\ntitle = "{secret}"\ncount = 1\napi_key = "plain"\n')
    planned = plans.tool_plans(TOOLS[1:2], settings(examples=examples))
    result = Result(settings(examples=examples), True, [ToolAudit(p) for p in planned], None, None)
    text = io.StringIO()
    report.render_plan(result, text)
    document = report.document(result)
    assert secret not in str(document) and secret not in text.getvalue()
    assert "plain" not in str(document["tools"][0]["arguments"])  # a secret-named key is redacted whole
    assert "idempotencyKey=" in text.getvalue()
