"""The MCP server's safety model: confined paths, checked names and URLs, dry runs, bounds (see the
package's docstring for the order a call meets them)."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from mcp.server.mcpserver.exceptions import ToolError

from mcpfault.errors import ProblemsError
from mcpfault.loopback import UrlError, check_http_url, is_loopback
from mcpfault.mcp_server.answers import Written

WORKDIR_VARIABLE = "MCPFAULT_WORKDIR"
MAX_TEXT_BYTES = 256 * 1024
MAX_REPORT_BYTES = 200 * 1024
MAX_BENCH_TASKS = 100
MAX_BENCH_S = 300.0
MAX_EXPERIMENT_S = 600.0
MAX_RUNS_LISTED = 100
MAX_AUDIT_CALLS = 200
MAX_AUDIT_S = 600.0
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")


def workdir() -> Path:
    return Path(os.environ.get(WORKDIR_VARIABLE) or os.getcwd()).resolve()


def confine(path: str, *, must_exist: bool = False) -> Path:
    """``path`` inside the work directory, or a ToolError that says which rule it broke."""
    root = workdir()
    if not isinstance(path, str) or not path.strip() or "\x00" in path:
        raise ToolError("path: give a non-empty path inside the work directory")
    given = Path(path)
    if ".." in given.parts:
        raise ToolError(f"path {path!r}: '..' is refused; give a path inside the work directory {root}")
    lexical = given if given.is_absolute() else root / given
    if given.is_absolute() and not inside(Path(os.path.normpath(lexical)), root):
        raise ToolError(f"path {path!r} is an absolute path outside the work directory {root}; refused")
    resolved = lexical.resolve()
    if not inside(resolved, root):
        raise ToolError(f"path {path!r} leads outside the work directory {root} through a symlink; refused")
    if must_exist and not resolved.exists():
        raise ToolError(f"path {path!r} does not exist in the work directory {root}")
    return resolved


def inside(path: Path, root: Path) -> bool:
    return path == root or path.is_relative_to(root)


def relative(path: Path) -> str:
    return str(path.relative_to(workdir())) if inside(path, workdir()) else str(path)


def checked_name(value: str, what: str, known: set[str] | None = None) -> str:
    if not isinstance(value, str) or not NAME.match(value):
        raise ToolError(f"{what} {value!r}: use letters, digits, '_', '.', '-' (at most 64, no leading '-')")
    if known is not None and value not in known:
        raise ToolError(f"{what} {value!r} is not one of: {', '.join(sorted(known))}")
    return value


def loopback_control_url(url: str) -> str:
    try:
        parts = check_http_url(url, "control_url", "the proxy's loopback control URL")
    except UrlError:
        parts = None
    if parts is None or parts.scheme != "http" or not is_loopback(str(parts.hostname)):
        raise ToolError(f"control_url {url!r}: give the proxy's loopback control URL, e.g. http://127.0.0.1:8474")
    return url


def confirmed(dry_run: bool, confirm_destructive: bool) -> bool:
    """True to act; False for a dry run; a refusal for a half-confirmed call."""
    if dry_run:
        return False
    if not confirm_destructive:
        raise ToolError("dry_run=false acts only with confirm_destructive=true as well; nothing was done")
    return True


def bound_text(text: str, what: str) -> None:
    if len(text.encode("utf-8")) > MAX_TEXT_BYTES:
        raise ToolError(f"{what} is larger than {MAX_TEXT_BYTES} bytes; refused")


def checked_rule(rule: dict[str, Any]) -> None:
    """A rule checked as a profile's is (NaN and Infinity refused by name), before a dry run says it would add it."""
    from mcpfault.api import check_rule

    try:
        check_rule(rule, source="set_faults rule")
    except ProblemsError as exc:
        raise ToolError("rule refused: " + "; ".join(problems(exc))) from None


def problems(exc: ProblemsError) -> list[str]:
    return [str(problem) for problem in exc.problems]


def write_confined(target: Path, text: str, dry_run: bool, confirm_destructive: bool, what: str) -> Written:
    bound_text(text, what)
    shown = relative(target)
    if target.exists():
        if dry_run or not confirm_destructive:  # never an overwrite by default: the answer says how
            return {
                "path": shown,
                "written": False,
                "dry_run": True,
                "message": f"{shown} exists; overwriting it needs dry_run=false and confirm_destructive=true",
                "undo": "nothing was written",
            }
        previous = target.with_name(target.name + ".previous")
        previous.write_bytes(target.read_bytes())
        target.write_text(text, encoding="utf-8")
        undo = f"the file it replaced is kept as {relative(previous)}"
        return {"path": shown, "written": True, "dry_run": False, "message": f"overwrote {shown}", "undo": undo}
    if dry_run:
        return {
            "path": shown,
            "written": False,
            "dry_run": True,
            "message": f"dry run: would write {shown}",
            "undo": "",
        }
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text, encoding="utf-8")
    return {"path": shown, "written": True, "dry_run": False, "message": f"wrote {shown}", "undo": f"delete {shown}"}
