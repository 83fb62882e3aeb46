"""The probe's policy: a ``[probe]`` table of the profile, or a ``--probe-policy`` TOML file.

Its keys are mcpfz_probe's ``RuntimePolicy`` fields, with the same names::

    [probe]
    workspace = "."                      # where the server may write (with tmpdir); default: the current directory
    tmpdir = "/tmp"                      # default: the system's temporary directory
    exec_allow = ["/usr/bin/git"]        # executables it may run (argv[0], as the sidecar reports it)
    net_allow = ["127.0.0.1", "*.internal:5432"]   # host globs, or host:port
    fs_write_allow = ["/var/cache/app"]  # instead of workspace and tmpdir
    sensitive_patterns = ["*/.ssh/*"]    # instead of mcpfz_probe's defaults

Relative paths are taken from the current directory, where the server starts too.
"""

from __future__ import annotations

import dataclasses
import tempfile
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from mcpfz_probe import RuntimePolicy

from mcpfault.errors import UsageError

_LISTS = ("exec_allow", "net_allow", "fs_write_allow", "sensitive_patterns")
_PATHS = ("workspace", "tmpdir")
KEYS = tuple(f.name for f in dataclasses.fields(RuntimePolicy))


def from_mapping(table: Mapping[str, Any], where: str) -> Any:
    """A ``RuntimePolicy`` from a table of its fields; a UsageError naming ``where`` and the key."""
    unknown = [key for key in table if key not in KEYS]
    if unknown:
        raise UsageError(f"{where}: unknown key {unknown[0]!r}; the keys are RuntimePolicy's: {', '.join(KEYS)}")
    values: dict[str, Any] = {"workspace": Path.cwd(), "tmpdir": Path(tempfile.gettempdir())}
    for key in _PATHS:
        if key in table:
            if not isinstance(table[key], str) or not table[key]:
                raise UsageError(f'{where}: {key} must be a path, e.g. {key} = "."')
            values[key] = Path(table[key]).absolute()
    for key in _LISTS:
        if key in table:
            items = table[key]
            if not isinstance(items, list) or not all(isinstance(item, str) for item in items):
                raise UsageError(f'{where}: {key} must be a list of strings, e.g. {key} = ["..."]')
            values[key] = tuple(str(Path(i).absolute()) if key == "fs_write_allow" else i for i in items)
    return RuntimePolicy(**values)


def load_file(path: Path) -> Any:
    """A ``--probe-policy`` file: the keys at the top, or under ``[probe]`` (so a profile serves too)."""
    try:
        document = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise UsageError(f"--probe-policy {path}: cannot read it ({exc.strerror})") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise UsageError(f"--probe-policy {path}: not valid TOML ({exc})") from None
    table = document.get("probe", document)
    if not isinstance(table, dict):
        raise UsageError(f"--probe-policy {path}: [probe] must be a table")
    return from_mapping(table, str(path))


def from_profile(path: Path) -> Any | None:
    """The profile's ``[probe]`` table as a policy, or None when it has none."""
    try:
        document = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError, UnicodeDecodeError):
        return None  # the profile's own loader reports what is wrong with the file
    table = document.get("probe")
    if table is None:
        return None
    if not isinstance(table, dict):
        raise UsageError(f"{path}: [probe] must be a table of RuntimePolicy's keys")
    return from_mapping(table, f"{path}: [probe]")
