"""The layer contracts (import-linter, pyproject.toml): the README draws exactly them, they hold, and an
upward import breaks them (shown on a copy of the package, never on the tree itself); and the one module
that builds a ``python -m mcpfault`` command line."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"


def contracts() -> dict[str, dict[str, object]]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    return {contract["id"]: contract for contract in config["contracts"]}


def drawn(layers: list[str]) -> str:
    """The layer list as the README draws it: without the package prefix and the `python -m` entry."""
    shown = [layer.replace("mcpfault.", "") for layer in layers if layer != "mcpfault.__main__"]
    return " -> ".join(shown)


def test_the_readme_draws_the_layer_contract() -> None:
    readme = (ROOT / "README.md").read_text()
    block = readme[readme.index("Layers point down only") :].split("```")[1]
    assert " ".join(block.split()) == drawn(contracts()["layers"]["layers"])  # type: ignore[arg-type]


def lint(cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(cwd)}
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache"], cwd=cwd, env=env, capture_output=True, text=True, timeout=120
    )


def test_the_contracts_hold_and_an_upward_import_breaks_them(tmp_path: Path) -> None:
    ignore = shutil.ignore_patterns("__pycache__")
    shutil.copytree(ROOT / "src" / "mcpfault", tmp_path / "mcpfault", ignore=ignore)
    shutil.copytree(
        ROOT / "integrations" / "chaostoolkit-mcpfault" / "chaosmcpfault", tmp_path / "chaosmcpfault", ignore=ignore
    )
    shutil.copy(ROOT / "pyproject.toml", tmp_path)
    clean = lint(tmp_path)
    assert clean.returncode == 0, clean.stdout + clean.stderr
    assert "3 kept, 0 broken" in clean.stdout

    engine = tmp_path / "mcpfault" / "faults" / "engine.py"
    engine.write_text(engine.read_text() + "\nfrom mcpfault.proxy import core  # an upward import\n")
    broken = lint(tmp_path)
    assert broken.returncode == 1
    assert "mcpfault.faults.engine -> mcpfault.proxy.core" in broken.stdout
    assert "Layers point down BROKEN" in broken.stdout


def test_one_module_builds_a_python_m_mcpfault_command_line() -> None:
    """app/argv.py: another spelling of ``python -m mcpfault`` is one the bench's fork server does not
    recognise (``is_mcpfault_argv``), and one more place to change."""
    src = ROOT / "src" / "mcpfault"
    spelled = [
        f"{path.relative_to(src).as_posix()}:{number}"
        for path in sorted(src.rglob("*.py"))
        if path != src / "app" / "argv.py"
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if re.search(r"""["']-m["'],\s*["']mcpfault["']""", line)
    ]
    assert spelled == [], spelled
