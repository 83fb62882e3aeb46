"""What an MCP client's configuration needs to launch a server behind mcpfault.

Clients (Claude Code, Claude Desktop, Cursor) start their servers with the working directory ``/``
(or somewhere of their own) and a minimal PATH, so everything here is absolute: the mcpfault
executable, the server command, a profile file, the events file. The environment passes a PATH made
of the directories those live in, so a server that starts helpers (``npx`` starts ``node``) finds them.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from mcpfault.app.argv import mcpfault_argv
from mcpfault.errors import UsageError
from mcpfault.faults import profile as profiles

CLIENTS = ("claude-code", "claude-desktop", "cursor")
# Where each client reads the JSON from (macOS, Linux, Windows for Claude Desktop; the project for Cursor).
WHERE = {
    "claude-desktop": "~/Library/Application Support/Claude/claude_desktop_config.json (macOS), "
    "%APPDATA%\\Claude\\claude_desktop_config.json (Windows)",
    "cursor": ".cursor/mcp.json in the project, or ~/.cursor/mcp.json for every project",
}
# Launchers whose first plain argument names the server (uvx mcp-server-time, npx -y @scope/server-x).
_LAUNCHERS = frozenset({"uvx", "npx", "bunx", "pipx", "uv", "node", "python", "python3", "deno", "docker"})


@dataclass(frozen=True, slots=True)
class Launch:
    name: str
    command: str
    args: tuple[str, ...]
    env: dict[str, str]


def launch(
    server: Sequence[str],
    profile: str,
    *,
    name: str | None = None,
    events: Path | None = None,
    mcpfault: Sequence[str] | None = None,
) -> Launch:
    """The command line a client runs: mcpfault proxy with absolute paths, in front of ``server``."""
    if not server:
        raise UsageError("no server command; put it after '--', e.g. mcpfault config cursor -- uvx mcp-server-time")
    found = shutil.which(server[0])
    if found is None:
        raise UsageError(
            f"{server[0]!r} is not on PATH here; clients launch servers with a minimal PATH, so give its "
            "absolute path (or install it where `which` finds it)"
        )
    # Absolute, but links kept: a virtualenv's python is a link, and resolving it would leave the virtualenv.
    server_command = [os.path.abspath(found), *server[1:]]
    resolved = profiles.resolve(profile)
    bundled = profiles.bundled().get(profile) == resolved
    profile_arg = profile if bundled else os.path.abspath(resolved)
    own = list(mcpfault) if mcpfault is not None else _mcpfault_command()
    args = [*own[1:], "proxy", "--config", profile_arg]
    if events is not None:
        args += ["--events", os.path.abspath(events.expanduser())]
    args += ["--", *server_command]
    directories = [str(Path(p).parent) for p in (own[0], server_command[0]) if os.sep in p]
    path = os.pathsep.join(dict.fromkeys([*directories, "/usr/local/bin", "/usr/bin", "/bin"]))
    return Launch(name or _name_of(server), own[0], tuple(args), {"PATH": path})


def render(client: str, launched: Launch) -> str:
    """The text to paste: a ``claude mcp add`` line, or the ``mcpServers`` JSON."""
    if client == "claude-code":
        env = [part for key, value in launched.env.items() for part in ("-e", f"{key}={value}")]
        return shlex.join(["claude", "mcp", "add", launched.name, *env, "--", launched.command, *launched.args])
    entry = {"command": launched.command, "args": list(launched.args), "env": launched.env}
    return json.dumps({"mcpServers": {launched.name: entry}}, indent=2)


def _mcpfault_command() -> list[str]:
    """This installation's mcpfault, absolute: the script beside the interpreter, else ``python -m mcpfault``."""
    script = Path(sys.executable).parent / "mcpfault"
    if script.is_file():
        return [str(script)]
    return mcpfault_argv()


def _name_of(server: Sequence[str]) -> str:
    base = Path(server[0]).name
    if base in _LAUNCHERS or base.startswith("python"):
        plain = [a for a in server[1:] if not a.startswith("-")]
        if plain:
            base = plain[0].rsplit("/", 1)[-1]
    cleaned = re.sub(r"[^A-Za-z0-9_-]+", "-", base).strip("-") or "server"
    return f"{cleaned}-mcpfault"
