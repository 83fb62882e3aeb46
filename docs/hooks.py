"""MkDocs hook: the home page, the command reference and the fault-type reference, generated at build time.

Each is built from what it shows (the README, the argparse parsers and the fault catalog), so it cannot
drift from it. ``mkdocs.yml`` names this file under ``hooks``; ``exclude_docs`` keeps it out of
the site itself. The page texts come from :func:`commands_page` and :func:`faults_page`, which the
tests call directly too.
"""

from __future__ import annotations

import argparse
import dataclasses
import inspect
import os
import re
import sys
import typing
from collections.abc import Iterator
from typing import Any

HOME_PAGE = "index.md"
COMMANDS_PAGE = "reference/commands.md"
FAULTS_PAGE = "reference/faults.md"
_HELP_WIDTH = "100"  # argparse wraps its help at $COLUMNS: fixed, so a build does not depend on the terminal


def on_files(files: Any, config: Any) -> Any:
    """Add the generated pages to the site (MkDocs 1.6's ``File.generated``)."""
    from mkdocs.structure.files import File

    files.append(File.generated(config, HOME_PAGE, content=home_page()))
    files.append(File.generated(config, COMMANDS_PAGE, content=commands_page()))
    files.append(File.generated(config, FAULTS_PAGE, content=faults_page()))
    return files


README = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "README.md")


def home_page() -> str:
    """The README, its links into ``docs/`` made relative to the site's root: the front door, once."""
    with open(README, encoding="utf-8") as readme:
        text = readme.read()
    return re.sub(r"\]\(docs/", "](", text)


def _subcommands(parser: argparse.ArgumentParser) -> Iterator[tuple[str, argparse.ArgumentParser]]:
    """Every subcommand below ``parser``, depth first, as (its full name, its parser)."""
    for action in parser._actions:  # argparse keeps the subparsers only here
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield name, sub
                for inner, deeper in _subcommands(sub):
                    yield f"{name} {inner}", deeper


def commands_page() -> str:
    """Every ``mcpfault`` command with its ``--help``, as the parsers print it."""
    from mcpfault.cli import _parser

    saved = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = _HELP_WIDTH
    try:
        parser = _parser()
        lines = [
            "# Command reference",
            "",
            "Generated from the command-line parsers when the site is built: each section is what",
            "`mcpfault COMMAND --help` prints. Exit codes are listed under [Commands at a glance](cli.md).",
            "",
            "## mcpfault",
            "",
            "```text",
            parser.format_help().rstrip(),
            "```",
        ]
        for name, sub in _subcommands(parser):
            lines += ["", f"## mcpfault {name}", "", "```text", sub.format_help().rstrip(), "```"]
        return "\n".join(lines) + "\n"
    finally:
        if saved is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = saved


def _field_comments(fault_type: type[Any]) -> dict[str, str]:
    """The ``#`` comment lines written above each settings field in the fault's module: units, meaning."""
    comments: dict[str, str] = {}
    pending: list[str] = []
    for line in inspect.getsource(fault_type).splitlines():
        stripped = line.strip()
        if stripped.startswith("#"):
            pending.append(stripped.lstrip("#").strip())
            continue
        field = re.match(r"(\w+)\s*:", stripped)
        if field and pending:
            comments[field.group(1)] = " ".join(pending)
        pending = []
    return comments


def faults_page() -> str:
    """Every fault type of the catalog: what it does, where it acts, its settings with defaults."""
    from mcpfault.faults import settings
    from mcpfault.faults.base import SERVER_REQUESTS
    from mcpfault.faults.catalog import CATALOG
    from mcpfault.faults.profile import GENERIC_KEYS

    lines = [
        "# Fault types",
        "",
        "Generated from the fault catalog when the site is built: one section per type a profile's",
        "`[[faults]]` rule can name, in the catalog's order. `mcpfault faults` prints the same in a terminal.",
        f"Every rule also takes the generic keys: {', '.join(f'`{key}`' for key in GENERIC_KEYS)}",
        "(see [profiles](profiles.md)).",
        "",
        "| type | what happens | modes | transports |",
        "|---|---|---|---|",
    ]
    for fault_type in CATALOG:
        first = (sys.modules[fault_type.__module__].__doc__ or "").strip().splitlines()[0]
        summary = first.split(": ", 1)[-1].replace("``", "`").replace("|", "\\|")
        lines.append(
            f"| [`{fault_type.type_name}`](#{fault_type.type_name}) | {summary} "
            f"| {', '.join(fault_type.MODES)} | {', '.join(sorted(fault_type.transports))} |"
        )
    for fault_type in CATALOG:
        doc = inspect.cleandoc(sys.modules[fault_type.__module__].__doc__ or "").replace("``", "`")
        lines += ["", f"## {fault_type.type_name}", "", doc, ""]
        lines.append(f"- **modes:** {', '.join(f'`{mode}`' for mode in fault_type.MODES)}")
        lines.append(f"- **event:** `{fault_type.event_name}`")
        lines.append(f"- **transports:** {', '.join(sorted(fault_type.transports))}")
        lines.append(f"- **methods:** {', '.join(f'`{m}`' for m in sorted(fault_type.targets - SERVER_REQUESTS))}")
        if fault_type.targets & SERVER_REQUESTS:
            served = ", ".join(f"`{m}`" for m in sorted(fault_type.targets & SERVER_REQUESTS))
            lines.append(f"- **server-to-client requests** (acted on in the client's answer): {served}")
        if fault_type.follows:
            lines.append(f"- **follows:** {', '.join(f'`{m}`' for m in sorted(fault_type.follows))}")
        hints = typing.get_type_hints(fault_type)
        fields = [field for field in dataclasses.fields(fault_type) if field.init]  # type: ignore[arg-type]
        if not fields:
            lines += ["", "No settings of its own."]
            continue
        comments = _field_comments(fault_type)
        lines += ["", "| setting | default | type | meaning |", "|---|---|---|---|"]
        for field in fields:
            missing = field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING
            if missing:
                default = "(required)"
            elif field.default is not dataclasses.MISSING:
                default = f"`{settings.toml_value(field.default)}`"
            else:
                default = f"`{settings.toml_value(field.default_factory())}`"  # type: ignore[operator]
            kind = settings.describe(hints[field.name], settings.toml_value).replace("|", "\\|")
            meaning = comments.get(field.name, "").replace("|", "\\|")
            lines.append(f"| `{field.name}` | {default} | {kind} | {meaning} |")
    return "\n".join(lines) + "\n"
