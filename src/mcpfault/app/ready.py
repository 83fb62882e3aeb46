"""The readiness record: where a running proxy can be reached, as data a parent reads.

``mcpfault proxy --ready-file PATH`` writes one JSON object to PATH once it serves, and writes it again
(atomically: a whole new file renamed over the old) when its server restarts::

    {"format": "mcpfault.ready/1", "pid": 4242, "transport": "http", "profile": "error",
     "listen": "http://127.0.0.1:40123/mcp", "control": "http://127.0.0.1:40124",
     "metrics": "http://127.0.0.1:40125/metrics", "generation": 0}

``listen`` is the MCP endpoint (HTTP only), ``control`` the control API and ``metrics`` the /metrics
endpoint, each null when not served; ``generation`` counts the server's restarts (null when the proxy
does not start the server). A reader never sees half a record: the file appears whole or not at all.
The human lines on stderr ("mcpfault: serving URL", "control API on URL") stay for people; programs
read this instead of parsing them.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from mcpfault.errors import MCPFaultError

FORMAT = "mcpfault.ready/1"
FILE_NAME = "proxy-ready.json"  # what mcpfault's own launchers call it in a run directory
POLL_S = 0.005


class ReadyFileError(MCPFaultError):
    """A readiness file that is not a record of this format, or a proxy that never wrote one."""


@dataclass(frozen=True, slots=True)
class Readiness:
    pid: int
    transport: str  # "stdio" or "http"
    profile: str
    listen: str | None = None  # the MCP endpoint clients connect to (HTTP)
    control: str | None = None  # the control API's base URL
    metrics: str | None = None  # the /metrics URL
    generation: int | None = None  # the server's restarts so far; None when the proxy did not start it

    def to_json(self) -> str:
        return json.dumps({"format": FORMAT, **asdict(self)}, separators=(",", ":"))


def write(path: Path, readiness: Readiness) -> None:
    """Write the record to ``path`` whole: a temporary file beside it, then renamed over it."""
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    temporary.write_text(readiness.to_json() + "\n", encoding="utf-8")
    os.replace(temporary, path)


def parse(text: str, where: str) -> Readiness:
    """The record in ``text`` (read from ``where``, named in the error)."""
    try:
        document = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ReadyFileError(f"{where}: not JSON ({exc.msg}); was it written by mcpfault proxy --ready-file?") from None
    if not isinstance(document, dict) or document.get("format") != FORMAT:
        raise ReadyFileError(f"{where}: not a readiness record (its format is not {FORMAT!r})")
    fields: dict[str, Any] = {key: document.get(key) for key in Readiness.__dataclass_fields__}
    if not isinstance(fields["pid"], int) or not isinstance(fields["transport"], str):
        raise ReadyFileError(f"{where}: a readiness record without its pid or transport")
    return Readiness(**fields)


def read(path: Path) -> Readiness | None:
    """The record at ``path``, or None while there is none."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    return parse(text, str(path))


def _read_of(path: Path, pid: int | None) -> Readiness | None:
    found = read(path)
    return found if found is not None and (pid is None or found.pid == pid) else None


def wait_for(
    path: Path,
    *,
    exited: Callable[[], bool],
    timeout_s: float,
    pid: int | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> Readiness:
    """Poll ``path`` until the record is there (``pid``'s, when given: one an earlier process left is
    not read as this one's); ReadyFileError when ``exited()`` or after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while (found := _read_of(path, pid)) is None:
        if exited():
            raise ReadyFileError("the proxy exited before it was ready")
        if time.monotonic() > deadline:
            raise ReadyFileError(f"the proxy was not ready after {timeout_s:g} s")
        sleep(POLL_S)
    return found


async def wait_for_async(
    path: Path, *, exited: Callable[[], bool], timeout_s: float, pid: int | None = None
) -> Readiness:
    """``wait_for`` on an event loop (anyio): the same rules, sleeping without blocking it."""
    import anyio

    with anyio.move_on_after(timeout_s):
        while (found := _read_of(path, pid)) is None:
            if exited():
                raise ReadyFileError("the proxy exited before it was ready")
            await anyio.sleep(POLL_S)
        return found
    raise ReadyFileError(f"the proxy was not ready after {timeout_s:g} s")
