"""The fault contract: a new fault type is one module plus one catalog line.

The proof is a fault that exists only here (tests/contract_fault/stamp.py), registered in a fresh
process the way a newcomer's catalog line would: the proxy applies it, and its events, spans, summary,
metric labels, the judge and the report know it, with nothing else changed. The catalog refuses what would make
two types indistinguishable, and no generic module switches on a fault type's name.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from mcpfault.analysis.join import faults_by_request
from mcpfault.faults.catalog import CATALOG, Catalog
from mcpfault.mock.world import World
from mcpfault.protocol.jsonlines import parse_jsonl
from mcpfault.proxy.events import read_events
from mcpfault.telemetry import names
from mcpfault.telemetry.span_files import read_spans

ROOT = Path(__file__).resolve().parent.parent
SRC = ROOT / "src" / "mcpfault"
REGISTERED = "from tests.contract_fault.stamp import register; register(); "


def _python(code: str, *arguments: str, **options: object) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run(
        [sys.executable, "-c", REGISTERED + code, *arguments],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        **options,  # type: ignore[call-overload]
    )


@pytest.mark.slow
def test_a_new_fault_type_is_its_module_and_one_catalog_line(tmp_path: Path) -> None:
    profile = tmp_path / "stamp.toml"
    profile.write_text('name = "stamp"\nseed = 1\n\n[[faults]]\nname = "s"\ntype = "stamp"\nvalue = "here"\n')
    device = World.generate(0).device_ids()[0]
    messages = [
        {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": _initialize()},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {
            "jsonrpc": "2.0",
            "id": 2,
            "method": "tools/call",
            "params": {"name": "get_device_status", "arguments": {"device_id": device}},
        },
    ]
    events, spans = tmp_path / "events.jsonl", tmp_path / "spans.jsonl"
    proxy = ["proxy", "--config", str(profile), "--events", str(events), "--spans", str(spans), "--"]
    server = [sys.executable, "-m", "mcpfault.mock", "--seed", "0"]
    ran = _python(
        "from mcpfault.cli import main; raise SystemExit(main())",
        *proxy,
        *server,
        input="".join(json.dumps(m) + "\n" for m in messages),
    )
    answers = {a["id"]: a for a in parse_jsonl(ran.stdout, where="the proxy's stdout")}
    assert answers[2]["result"]["structuredContent"]["stamped_by"] == "here", ran.stderr
    # The events file, the span and the summary name it, by its type, mode and event.
    assert faults_by_request(read_events(events))[2] == [("stamp", "stamp")]
    stamped = [e for span in read_spans(spans) for e in span.events if e.name == "mcpfault.stamp"]
    assert [dict(e.attributes)[names.FAULT_FIELDS] for e in stamped] == [("stamped_by",)]
    assert "stamp" in ran.stderr  # the fault table at exit
    # The analysis (a process of its own, with the same catalog line): spans to faults, tables, labels, the
    # judge, and the report.
    judged = _python(
        "import json, sys\n"
        "from mcpfault.analysis import summary, traces\n"
        "from mcpfault.analysis.effects import AttemptView, TaskReads, affects\n"
        "from mcpfault.faults.catalog import CATALOG\n"
        "from mcpfault.proxy.observe import fault_label_sets\n"
        "from mcpfault.telemetry.span_files import read_spans\n"
        "from mcpfault.analysis.records import TaskRecord\n"
        "from mcpfault.harness.report import ReportMeta, render_markdown\n"
        "found = [f for span in read_spans(sys.argv[1]) for f in traces.proxy_faults(span)]\n"
        "types, modes = fault_label_sets(CATALOG)\n"
        "view = AttemptView(tool='get_device_status', changed_fields=frozenset({'stamped_by'}))\n"
        "reads = TaskReads({'get_device_status': frozenset({'status'})})\n"
        "records = [TaskRecord('stamped', 'naive', 0, 0, 'site_triage', 'recovered', fault_types=('stamp',),\n"
        "    affected_types=('stamp',), recovery_s=0.2, fault_modes=('stamp:stamp',))]\n"
        "meta = ReportMeta('mcpfault bench', 0, 1, 1.0, 1, '', '')\n"
        "report = render_markdown(summary.summarize(records), meta, records=records)\n"
        "print(json.dumps([found, 'stamp' in summary.FAULT_TYPE_ORDER, 'stamp' in types, 'stamp' in modes,\n"
        "    affects('stamp', view, reads), affects('stamp', AttemptView(tool='get_device_status'), reads),\n"
        "    [line for line in report.splitlines() if line.startswith('| stamp ')]]))\n",
        str(spans),
    )
    verdict = json.loads(judged.stdout) if judged.returncode == 0 else None
    assert verdict is not None, judged.stderr
    assert verdict[:6] == [[["stamp", "stamp"]], True, True, True, False, True]
    # The report's recovery table has a row for it: the one task, recovered in 200 ms.
    assert [row.split("|")[1:3] for row in verdict[6]] == [[" stamp      ", " 200 ms / 200 ms (1) "]], verdict[6]


def _initialize() -> dict[str, object]:
    return {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "contract", "version": "1"}}


def test_the_catalog_refuses_what_would_make_two_types_indistinguishable() -> None:
    from tests.contract_fault.stamp import Stamp

    class Nameless:
        type_name = "nameless"
        MODES = ("x",)

        def plan(self) -> None: ...

    catalog = Catalog()
    with pytest.raises(TypeError, match="event_name"):
        catalog.register(Nameless)  # type: ignore[arg-type]
    catalog.register(Stamp)
    with pytest.raises(ValueError, match="registered twice"):
        catalog.register(Stamp)
    for event, said in [
        ("mcpfault.stamp", "both name their event"),
        ("stamp", "must be mcpfault.<what it did>"),
        (names.EVENT_CONTROL, "other events"),
    ]:
        other = type("Other", (Stamp,), {"type_name": "other", "event_name": event, "__slots__": ()})
        with pytest.raises(ValueError, match=said):
            catalog.register(other)
    assert catalog.of_event("mcpfault.stamp") is Stamp
    assert {t.event_name for t in CATALOG} & set(_other_events()) == set()


def _other_events() -> list[str]:
    return [value for key, value in vars(names).items() if key.startswith("EVENT_") and isinstance(value, str)]


def test_no_module_switches_on_fault_type_names() -> None:
    """Outside the fault modules, no code compares a fault type with a name (==, in, match), maps type
    names in a literal, or asks isinstance of a fault class: each fault's behaviour is its module's."""
    fault_modules = {Path(sys.modules[t.__module__].__file__ or "") for t in CATALOG}
    # Maps of bundled profile names, several of which are also fault types' names ("timeout", "stale").
    profile_maps = {("harness/bench.py", "SLOW_FIRST")}
    type_names = set(CATALOG.names())
    classes = {t.__name__ for t in CATALOG}
    offenders = []
    for path in sorted(SRC.rglob("*.py")):
        if path in fault_modules:
            continue
        where, text = path.relative_to(SRC).as_posix(), path.read_text()
        lines = text.splitlines()
        for node in ast.walk(ast.parse(text)):
            if not _switches(node, type_names, classes):
                continue
            line = lines[getattr(node, "lineno", 1) - 1].lstrip()
            if not any(where == file and line.startswith(name) for file, name in profile_maps):
                offenders.append(f"{where}:{getattr(node, 'lineno', '?')}")
    assert not offenders, "fault type names switched on outside their modules: " + ", ".join(offenders)


def _switches(node: ast.AST, type_names: set[str], classes: set[str]) -> bool:
    if isinstance(node, ast.Compare):
        operands = [node.left, *node.comparators]
        return any(_mentions_type(o) for o in operands) and any(_names_a_type(o, type_names) for o in operands)
    if isinstance(node, ast.Match):
        return _mentions_type(node.subject) and any(
            isinstance(case.pattern, ast.MatchValue) and _names_a_type(case.pattern.value, type_names)
            for case in node.cases
        )
    if isinstance(node, ast.Dict):  # a map keyed by fault types
        keys = {k.value for k in node.keys if isinstance(k, ast.Constant) and isinstance(k.value, str)}
        return len(keys & type_names) >= 2
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "isinstance":
        checked = node.args[1:] if len(node.args) > 1 else []
        elements = [e for c in checked for e in (c.elts if isinstance(c, ast.Tuple) else [c])]
        return any(isinstance(e, ast.Name | ast.Attribute) and _name_of(e) in classes for e in elements)
    return False


def _names_a_type(node: ast.expr, type_names: set[str]) -> bool:
    if isinstance(node, ast.Constant):
        return node.value in type_names
    if isinstance(node, ast.Tuple | ast.List | ast.Set):
        return any(isinstance(e, ast.Constant) and e.value in type_names for e in node.elts)
    return False


def _mentions_type(node: ast.expr) -> bool:
    return "type" in _name_of(node) or "fault" in _name_of(node)


def _name_of(node: ast.expr) -> str:
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Subscript):
        return _name_of(node.value)
    return ""


def test_the_scan_catches_each_form_of_switch() -> None:
    """The scan above can fail: each form of a name switch is caught, and a profile name is not."""
    type_names, classes = {"crash", "stale"}, {"Crash"}
    caught = [
        'rule.type_name == "crash"',
        'fault_type in ("crash", "stale")',
        'fault_type in {"crash"}',
        'match fault.type_name:\n    case "crash":\n        pass',
        '{"crash": 1, "stale": 2}',
        'by_type = {"crash": "kill", "stale": "old"}',
        "isinstance(rule.fault, Crash)",
    ]
    for code in caught:
        assert any(_switches(n, type_names, classes) for n in ast.walk(ast.parse(code))), code
    for code in ['profile == "stale"', 'name in ("crash",)', "isinstance(x, int)", '{"type": "crash", "crash": 1}']:
        assert not any(_switches(n, type_names, classes) for n in ast.walk(ast.parse(code))), code


@pytest.mark.slow
def test_what_clients_received_is_one_vocabulary(tmp_path: Path) -> None:
    """Every ``client_received`` the proxy records, over stdio and HTTP faults, is a ``names.Received``."""
    seen: set[str] = set()
    for profile, transport in [("mixed", "stdio"), ("http", "http"), ("storm", "http")]:
        out = tmp_path / f"{profile}-{transport}"
        command = ["run", "--profile", profile, "--transport", transport, "--tasks", "12", "--out", str(out)]
        ran = subprocess.run(
            [sys.executable, "-m", "mcpfault", *command], capture_output=True, text=True, timeout=300, check=False
        )
        assert ran.returncode in (0, 1), ran.stderr
        for events in out.rglob("events.jsonl"):
            seen |= {str(row.get("client_received")) for row in read_events(events)}
    assert seen and seen <= names.RECEIVED, seen - names.RECEIVED
    assert {"response", "http_error"} <= seen
