"""Every class name in the package is unique: one name, one thing (a reader, a traceback and a grep
each find the one they mean)."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "src" / "mcpfault"


def class_names(root: Path) -> dict[str, list[str]]:
    found: dict[str, list[str]] = defaultdict(list)
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ClassDef):
                found[node.name].append(f"{path.relative_to(root)}:{node.lineno}")
    return found


def duplicates(root: Path) -> dict[str, list[str]]:
    return {name: places for name, places in class_names(root).items() if len(places) > 1}


def test_no_class_name_is_defined_twice() -> None:
    assert duplicates(PACKAGE) == {}


def test_a_second_class_of_the_same_name_is_caught(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text("class Session:\n    pass\n")
    (tmp_path / "b.py").write_text("def f() -> None:\n    class Session:\n        pass\n")
    assert duplicates(tmp_path) == {"Session": ["a.py:1", "b.py:2"]}
