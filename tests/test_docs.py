"""The documentation site: it builds in strict mode, a broken link fails it, and the generated
references cover every fault type and every command."""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from mcpfault.faults.catalog import CATALOG

ROOT = Path(__file__).resolve().parent.parent


def _hooks() -> ModuleType:
    spec = importlib.util.spec_from_file_location("mcpfault_docs_hooks", ROOT / "docs" / "hooks.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _site_copy(tmp_path: Path) -> Path:
    """docs/ and mkdocs.yml in a scratch directory, so a test may break them."""
    copy = tmp_path / "repo"
    shutil.copytree(ROOT / "docs", copy / "docs", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "mkdocs.yml", copy / "mkdocs.yml")
    shutil.copy(ROOT / "README.md", copy / "README.md")  # the home page is generated from it
    return copy


def _build(repo: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(repo / "mkdocs.yml"), "-d", str(repo / "site")],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        check=False,
    )


@pytest.mark.slow
def test_the_site_builds_in_strict_mode_and_a_broken_link_fails_it(tmp_path: Path) -> None:
    repo = _site_copy(tmp_path)
    built = _build(repo)
    assert built.returncode == 0, built.stdout + built.stderr
    faults_html = (repo / "site" / "reference" / "faults" / "index.html").read_text(encoding="utf-8")
    for fault_type in CATALOG:
        assert f'id="{fault_type.type_name}"' in faults_html, fault_type.type_name
    assert (repo / "site" / "reference" / "commands" / "index.html").exists()

    page = repo / "docs" / "reference" / "guarantees.md"
    page.write_text(page.read_text(encoding="utf-8") + "\nSee [nowhere](no-such-page.md).\n", encoding="utf-8")
    broken = _build(repo)
    assert broken.returncode != 0
    assert "no-such-page.md" in broken.stdout + broken.stderr


def test_the_fault_reference_lists_every_catalog_type_with_its_settings() -> None:
    page = _hooks().faults_page()
    headings = re.findall(r"^## (\S+)$", page, flags=re.MULTILINE)
    assert headings == list(CATALOG.in_order())
    latency = page.split("## latency", 1)[1].split("\n## ", 1)[0]
    assert "| `delay_s` | `0.25` |" in latency
    assert "Seconds added to the response" in latency  # the field's own comment, from the module


def test_the_command_reference_has_every_command_as_the_parser_prints_it() -> None:
    from mcpfault.cli import _parser

    page = _hooks().commands_page()
    names = [name for name, _sub in _hooks()._subcommands(_parser())]
    for name in ["proxy", "bench", "run", "validate", "experiment run", "traces show", "ctl"]:
        assert name in names
    for name in names:
        assert f"\n## mcpfault {name}\n" in page, name
    assert "usage: mcpfault proxy" in page


def test_the_readmes_relative_links_point_at_files_that_exist() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    targets = re.findall(r"\]\(([^)\s#]+)(?:#[^)]*)?\)", readme)
    local = [target for target in targets if not re.match(r"[a-z]+:", target)]
    assert local, "the README links to no page of its own"
    missing = [target for target in local if not (ROOT / target).exists()]
    assert not missing, f"README links to files that do not exist: {missing}"


def test_the_home_page_is_the_readme_with_its_links_into_the_site() -> None:
    page = _hooks().home_page()
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert page.splitlines()[0] == readme.splitlines()[0] == "# mcpfault"
    assert "](docs/" in readme and "](docs/" not in page
    assert page.count("](tutorials/your-agent.md)") == readme.count("](docs/tutorials/your-agent.md)") >= 1
