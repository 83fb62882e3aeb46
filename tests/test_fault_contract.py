"""The fault contract: a new fault type is one module plus one catalog line.

Every map from a fault type to a name (its span event, its place in tables, its metric labels) is
derived from the catalog; these tests fail when a fault type forgets one, or two share one.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from mcpfault.analysis import summary, traces
from mcpfault.faults.base import Fault
from mcpfault.faults.catalog import CATALOG, Catalog
from mcpfault.proxy.observe import fault_label_sets
from mcpfault.telemetry import names

SRC = Path(__file__).resolve().parent.parent / "src" / "mcpfault"
EVENT_CONSTANTS = {value: key for key, value in vars(names).items() if key.startswith("EVENT_")}


@pytest.mark.parametrize("fault_type", list(CATALOG), ids=lambda t: t.type_name)
def test_every_fault_type_names_its_event_in_telemetry_names(fault_type: type[Fault]) -> None:
    assert fault_type.event_name in EVENT_CONSTANTS, f"{fault_type.type_name}: define its event in telemetry/names.py"
    assert fault_type.MODES, f"{fault_type.type_name}: no MODES"


def test_event_names_are_unique_so_the_inverse_map_is_exact() -> None:
    events = [t.event_name for t in CATALOG]
    assert len(events) == len(set(events))
    assert {t.event_name: t.type_name for t in CATALOG} == traces.FAULT_OF_EVENT
    assert set(traces.FAULT_OF_EVENT.values()) == set(CATALOG.names())


def test_tables_and_metric_labels_list_every_fault_type() -> None:
    assert set(summary.FAULT_TYPE_ORDER) == set(CATALOG.names())
    types, modes = fault_label_sets(CATALOG)
    assert set(types) == set(CATALOG.names())
    assert {m for t in CATALOG for m in t.MODES} <= set(modes)


def test_no_generic_module_switches_on_fault_names() -> None:
    """Outside the fault modules, no code compares a fault type with a name, nor maps names in a literal."""
    fault_modules = {SRC / "faults" / f"{module}.py" for module in _fault_module_names()}
    type_names = set(CATALOG.names())
    offenders = []
    for path in sorted(SRC.rglob("*.py")):
        if path in fault_modules or {"harness", "mock", "cli"} & set(path.relative_to(SRC).parts):
            continue  # harness, mock and cli use the same words as profile and task names
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Compare):
                operands = [node.left, *node.comparators]
                named = any(_mentions_type(o) for o in operands)
                literal = any(isinstance(o, ast.Constant) and o.value in type_names for o in operands)
                if named and literal:
                    offenders.append(f"{path.relative_to(SRC)}:{node.lineno}")
            elif isinstance(node, ast.Dict):
                keys = [k.value for k in node.keys if isinstance(k, ast.Constant)]
                values = [v.value for v in node.values if isinstance(v, ast.Constant)]
                if len([k for k in keys + values if k in type_names]) >= 2:
                    offenders.append(f"{path.relative_to(SRC)}:{node.lineno}")
    assert not offenders, "fault type names switched on outside their modules: " + ", ".join(offenders)


def _mentions_type(node: ast.expr) -> bool:
    text = node.attr if isinstance(node, ast.Attribute) else node.id if isinstance(node, ast.Name) else ""
    return "type" in text


def _fault_module_names() -> set[str]:
    return {t.__module__.rsplit(".", 1)[1] for t in CATALOG}


def test_catalog_refuses_a_fault_without_an_event_name() -> None:
    class NoEvent:
        type_name = "no_event"
        MODES = ("x",)

        def plan(self) -> None: ...

    with pytest.raises(TypeError, match="event_name"):
        Catalog().register(NoEvent)  # type: ignore[arg-type]
