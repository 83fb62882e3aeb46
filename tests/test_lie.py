"""The lie fault on the mock server's real answers: valid, schema-conformant, one field changed, same seed same lies."""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys
from random import Random
from typing import Any

import jsonschema
import pytest

from mcpfault.analysis.join import Touch
from mcpfault.analysis.judge import TaskRun, Verdict, classify
from mcpfault.analysis.records import Outcome, TaskRecord, read_records
from mcpfault.faults.base import Call, PlanContext
from mcpfault.faults.catalog import CATALOG
from mcpfault.faults.lie import ALL_MODES, Lie, Mode
from mcpfault.faults.profile import loads
from mcpfault.harness.lies import AgentLies, agent_lies, lies_section
from mcpfault.mock import World
from mcpfault.mock.session import Session
from mcpfault.protocol import jsonrpc
from mcpfault.protocol.jsonlines import read_jsonl

SEED = 7
INITIALIZE = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "test", "version": "0"}}


class Mock:
    """The mock server in process: its tools/list entries and its answers, as the proxy would see them."""

    def __init__(self) -> None:
        self.session = Session(World.generate(SEED))
        self.next_id = 1
        self.ask("initialize", INITIALIZE)
        self.tools = {tool["name"]: tool for tool in self.ask("tools/list", {})["result"]["tools"]}

    def ask(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        self.next_id += 1
        response = self.session.handle({"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params})
        assert "error" not in response, response
        return response

    def call(self, tool: str, **arguments: Any) -> tuple[Call, bytes]:
        params = {"name": tool, "arguments": arguments}
        request = {"jsonrpc": "2.0", "id": self.next_id + 1, "method": "tools/call", "params": params}
        return Call.from_body(request), jsonrpc.encode(self.ask("tools/call", params))

    def first_site(self) -> str:
        _call, data = self.call("list_sites")
        site: str = json.loads(data)["result"]["structuredContent"]["sites"][0]["site_id"]
        return site

    def context(self, *, seed: int = 3, history: tuple[bytes, ...] = ()) -> PlanContext:
        return PlanContext("lies", lambda _name: True, history=lambda _call: history, tool=self.tools.get, seed=seed)


def _leaves(node: Any, path: tuple[Any, ...] = ()) -> dict[tuple[Any, ...], Any]:
    if isinstance(node, dict):
        return {p: v for key, child in node.items() for p, v in _leaves(child, (*path, key)).items()}
    if isinstance(node, list) and node:
        return {p: v for i, child in enumerate(node) for p, v in _leaves(child, (*path, i)).items()}
    return {path: node}


def _tell(
    mock: Mock, lie: Lie, tool: str, ctx: PlanContext, rng_seed: int = 1, **arguments: Any
) -> tuple[Any, Any, Any]:
    """(the true structured content, the lied one, the delivery) for one real answer."""
    call, data = mock.call(tool, **arguments)
    injection = lie.plan(call, Random(rng_seed), ctx)
    assert injection.response is not None
    delivery = injection.response(data)
    assert delivery.data is not None
    body = json.loads(delivery.data)  # still one valid JSON-RPC answer to the same request
    assert body["jsonrpc"] == "2.0" and body["id"] == json.loads(data)["id"] and "error" not in body
    result = body["result"]
    schema = mock.tools[tool]["outputSchema"]
    jsonschema.validate(result["structuredContent"], schema)  # conforms to the tool's outputSchema
    texts = [item["text"] for item in result["content"] if item["type"] == "text"]
    assert texts and all(json.loads(text) == result["structuredContent"] for text in texts)  # the mirror agrees
    return json.loads(data)["result"]["structuredContent"], result["structuredContent"], delivery


# (mode, tool, the field the lie is told in) on the mock's real answers.
CASES: list[tuple[Mode, str, str]] = [
    ("swap", "list_devices", "/devices/*/status"),
    ("scale", "get_device_status", "interfaces_total"),
    ("shift", "get_device_status", "status"),
    ("empty", "list_devices", "devices"),
    ("truncate", "list_devices", "devices"),
    ("contradict", "get_device_status", "/maintenance/enabled"),
]


@pytest.mark.parametrize(("mode", "tool", "field"), CASES)
def test_each_mode_lies_in_the_chosen_field_only(mode: Mode, tool: str, field: str) -> None:
    mock = Mock()
    site = mock.first_site()
    arguments: dict[str, Any] = {"site_id": site}
    if tool == "get_device_status":
        _call, listing = mock.call("list_devices", site_id=site)
        arguments = {"device_id": json.loads(listing)["result"]["structuredContent"]["devices"][0]["device_id"]}
    true, lied, delivery = _tell(mock, Lie(modes=(mode,), fields=(field,)), tool, mock.context(), **arguments)
    key = field.rsplit("/", 1)[-1].replace("*", "")
    assert lied != true
    assert delivery.fields == (key,)
    differing = {path for path, value in _leaves(true).items() if _leaves(lied).get(path, "<absent>") != value}
    differing |= {path for path in _leaves(lied) if path not in _leaves(true)}
    # Every difference lies inside the chosen field (list items of a list field count as that field).
    assert differing and all(key in path for path in differing), differing
    if mode == "swap":
        assert len(differing) == 2  # two items' statuses exchanged
        assert sorted(str(_leaves(true)[p]) for p in differing) == sorted(str(_leaves(lied)[p]) for p in differing)
    if mode == "scale":
        assert lied[key] == true[key] * 10
    if mode == "empty":
        assert lied[key] == [] and true[key]
    if mode == "truncate":
        assert lied[key] == true[key][: len(true[key]) // 2]
    if mode == "contradict":
        assert lied["maintenance"]["enabled"] is (not true["maintenance"]["enabled"])
    if mode == "shift":
        enum = mock.tools[tool]["outputSchema"]["properties"]["status"]["enum"]
        assert lied["status"] == enum[(enum.index(true["status"]) + 1) % len(enum)]


def test_stale_field_takes_one_field_from_an_earlier_answer() -> None:
    mock = Mock()
    site = mock.first_site()
    _call, listing = mock.call("list_devices", site_id=site)
    device = json.loads(listing)["result"]["structuredContent"]["devices"][0]["device_id"]
    _call, before = mock.call("get_device_status", device_id=device)
    mock.call("set_maintenance", device_id=device, enabled=True, reason="lie test")
    ctx = mock.context(history=(before,))
    true, lied, delivery = _tell(
        mock, Lie(modes=("stale_field",), fields=("enabled",)), "get_device_status", ctx, device_id=device
    )
    assert true["maintenance"]["enabled"] is True and lied["maintenance"]["enabled"] is False
    assert lied["maintenance"]["reason"] == true["maintenance"]["reason"]  # the rest is fresh
    assert lied["as_of"] == true["as_of"]
    assert delivery.fields == ("enabled",)


def test_no_field_to_lie_in_leaves_the_answer_as_it_was() -> None:
    mock = Mock()
    call, data = mock.call("list_sites")
    injection = Lie(modes=("stale_field",)).plan(call, Random(0), mock.context())
    assert injection.response is not None
    delivery = injection.response(data)
    assert delivery.data == data and delivery.fields == ()


@pytest.mark.parametrize("mode", [m for m in ALL_MODES if m != "stale_field"])
def test_auto_lies_in_a_non_id_field_and_stays_valid(mode: Mode) -> None:
    mock = Mock()
    site = mock.first_site()
    true, lied, delivery = _tell(mock, Lie(modes=(mode,)), "list_devices", mock.context(), site_id=site)
    assert lied != true and len(delivery.fields) == 1
    assert not delivery.fields[0].endswith("_id")


def test_same_seed_same_lies_other_seeds_other_fields() -> None:
    mock = Mock()
    site = mock.first_site()

    def told(seed: int, rng_seed: int) -> tuple[Any, tuple[str, ...]]:
        _true, lied, delivery = _tell(mock, Lie(), "list_devices", mock.context(seed=seed), rng_seed, site_id=site)
        return lied, delivery.fields

    assert all(told(11, n) == told(11, n) for n in range(10))
    assert len({told(seed, 1)[1] for seed in range(12)} | {told(3, n)[1] for n in range(12)}) > 1


@pytest.mark.parametrize("mode", [m for m in ALL_MODES if m != "stale_field"])
def test_auto_lies_in_the_field_dry_run_names(mode: Mode) -> None:
    mock = Mock()
    site = mock.first_site()
    lie = Lie(modes=(mode,))
    named = lie.touches(mock.tools["list_devices"], seed=3, rule_name="lies")[mode]
    assert len(named) == 1 and named[0].startswith("/")
    _true, _lied, delivery = _tell(mock, lie, "list_devices", mock.context(seed=3), site_id=site)
    assert delivery.fields == (named[0].rsplit("/", 1)[-1],)
    explicit = Lie(modes=("swap", "empty"), fields=("status",)).touches(
        mock.tools["list_devices"], seed=3, rule_name="x"
    )
    assert explicit == {"swap": ["/devices/*/status"]}  # a status is no list: it cannot be emptied


EVERYTHING = (
    pathlib.Path(__file__).resolve().parent / "npm/node_modules/@modelcontextprotocol/server-everything/dist/index.js"
)
TIME_SERVER = pathlib.Path(sys.executable).parent / "mcp-server-time"


@pytest.mark.parametrize(
    ("server", "tool", "field"),
    [
        (["node", str(EVERYTHING)], "get-structured-content", "/temperature"),
        ([str(TIME_SERVER)], "get_current_time", "/is_dst"),
    ],
)
def test_dry_run_names_the_fields_each_lie_rule_may_change_on_a_third_party_server(
    tmp_path: pathlib.Path, server: list[str], tool: str, field: str
) -> None:
    profile = tmp_path / "lies.toml"
    profile.write_text('name = "any"\nseed = 3\n[[faults]]\nname = "any-lie"\ntype = "lie"\nprobability = 0.2\n')
    done = _mcpfault("proxy", "--dry-run", "-c", str(profile), "--", *server)
    assert done.returncode == 0, done.stderr
    table = done.stdout[done.stdout.index("fields each rule may change") :]
    assert tool in table and field in table, done.stdout


def test_a_profile_names_lie_with_its_settings_and_bad_ones_are_explained() -> None:
    profile = loads(
        'name = "l"\n[[faults]]\nname = "lies"\ntype = "lie"\nmodes = ["swap", "scale"]\nfields = ["status"]\n'
    )
    assert CATALOG.get("lie") is Lie and CATALOG.get("lie").effect == "changed_fields"  # type: ignore[union-attr]
    assert profile.rules[0].fault == Lie(modes=("swap", "scale"), fields=("status",))
    with pytest.raises(Exception, match="modes"):
        loads('name = "l"\n[[faults]]\nname = "lies"\ntype = "lie"\nmodes = ["fib"]\n')


# ---- judged: a wrong answer a lie affected is believed_lie ------------------------------------------


def _run_of(answer: Any) -> TaskRun:
    return TaskRun(0, "site_triage", "ams2", "t0", 0.0, 1.0, answer=answer, attempts=2, calls=2)


def test_a_wrong_answer_a_lie_affected_is_a_believed_lie() -> None:
    lied = Touch(fault_types=["lie"], fault_modes=["lie:swap"], affected_types=["lie"])
    corrupt = Touch(fault_types=["malformed"], fault_modes=["malformed:wrong_type"], affected_types=["malformed"])
    wrong = Verdict(correct=False, why="answer differs")
    assert classify(_run_of(["x"]), wrong, lied)[:2] == ("failed_silent", "believed_lie")
    assert classify(_run_of(["x"]), wrong, corrupt)[:2] == ("failed_silent", "wrong_answer")
    # A lie that touched the task without changing what it reads is not believed: a wrong answer is its own.
    untouched = Touch(fault_types=["lie"], fault_modes=["lie:swap"])
    assert classify(_run_of(["x"]), wrong, untouched)[:2] == ("failed_silent", "wrong_answer")
    # Noticed (the agent raised): detected, not believed.
    raised = TaskRun(0, "site_triage", "ams2", "t0", 0.0, 1.0, failure="inconsistent", detail="two sources disagree")
    assert classify(raised, wrong, lied)[:2] == ("failed_detected", "inconsistent")


def _mcpfault(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "mcpfault", *args], capture_output=True, text=True, timeout=180)


@pytest.mark.parametrize("agent", ["naive", "retry-only"])
def test_run_with_the_lies_profile_naive_and_retry_only_believe_lies(tmp_path: pathlib.Path, agent: str) -> None:
    outcomes: list[list[tuple[Any, ...]]] = []
    for attempt in ("first", "again"):
        out = tmp_path / attempt
        done = _mcpfault("run", "--profile", "lies", "--agent", agent, "--tasks", "40", "--out", str(out))
        assert done.returncode in {0, 1}, done.stderr
        records = list(read_records(out / "records.jsonl"))
        events = read_jsonl(out / "events.jsonl", strict=True)
        lies = [event for event in events if event.get("fault_type") == "lie"]
        assert lies and all(event["fields"] for event in lies if event["client_received"] == "response")
        believed = [r for r in records if r.failure == "believed_lie"]
        assert believed, [(r.task, r.outcome, r.fault_modes) for r in records if r.fault_types]
        for record in believed:
            assert record.outcome == "failed_silent" and "lie" in record.affected_types
            assert record.answer != record.expected
        outcomes.append([(r.task_index, r.outcome, r.failure, r.fault_modes) for r in records])
        outcomes.append([(e["request_id"], e["fault_mode"], e.get("fields")) for e in lies])
    assert outcomes[0] == outcomes[2] and outcomes[1] == outcomes[3]  # same seed, same lies, same judgments


# ---- the report's "believed a lie" row per agent -----------------------------------------------------


def _record(
    agent: str, outcome: Outcome, failure: str | None = None, affected: tuple[str, ...] = ("lie",)
) -> TaskRecord:
    return TaskRecord(
        "lies", agent, 0, 0, "site_triage", outcome, fault_types=("lie",), failure=failure, affected_types=affected
    )


def test_lies_section_counts_per_agent_what_lies_did() -> None:
    records = [
        _record("resilient", "recovered"),
        _record("naive", "failed_silent", "believed_lie"),
        _record("naive", "failed_silent", "write_denied"),
        _record("naive", "success"),
        _record("naive", "success", affected=()),  # a lie that changed nothing the task reads: not lied to
        _record("resilient", "failed_detected", "inconsistent"),
        TaskRecord("lies", "retry-only", 0, 1, "site_triage", "failed_silent", failure="wrong_answer"),  # no lie
    ]
    assert agent_lies(records) == [
        AgentLies("naive", lied_to=3, believed=2, noticed=0, cross_checked=0, absorbed=1),
        AgentLies("resilient", lied_to=2, believed=0, noticed=1, cross_checked=1, absorbed=0),
    ]
    lines = lies_section(records)
    assert lines[0] == "## Lies" and any("believed a lie" in line for line in lines)
    assert lies_section([r for r in records if not r.affected_types]) == []


def test_bench_lies_and_lies_storm_report_a_believed_a_lie_row_per_agent(tmp_path: pathlib.Path) -> None:
    out = tmp_path / "bench"
    done = _mcpfault("bench", "--profiles", "lies,lies_storm", "--tasks", "20", "--out", str(out))
    assert done.returncode in {0, 1}, done.stderr
    records = list(read_records(out / "records.jsonl"))
    assert {r.profile for r in records} == {"lies", "lies_storm"}
    rows = {a.agent: a for a in agent_lies(records)}
    assert rows["naive"].believed > 0 and rows["retry-only"].believed > 0
    report = (out / "report.md").read_text()
    table = report[report.index("## Lies") :].split("\n\n")[2].splitlines()
    assert table[0].split("|")[3].strip() == "believed a lie"
    assert [line.split("|")[1].strip() for line in table[2:]] == list(rows)
    for line in table[2:]:
        assert int(line.split("|")[3]) == rows[line.split("|")[1].strip()].believed
