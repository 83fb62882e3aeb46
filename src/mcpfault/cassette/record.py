"""``mcpfault record --out FILE -- CMD`` over stdio: a transparent relay between the client (our stdin and
stdout) and the server (CMD's), writing every message, redacted, to the cassette when the session ends.

With ``--config PROFILE`` the server is run behind ``mcpfault proxy --config PROFILE``, so the faults the
profile injects are what gets recorded; without one, nothing is changed on the wire.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import json
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from types import FrameType
from typing import IO, Any

from mcpfault.app.argv import mcpfault_argv
from mcpfault.cassette.format import (
    FORMAT_VERSION,
    Cassette,
    Direction,
    Entry,
    load,
    redact_message,
    secret_values,
    write,
)
from mcpfault.errors import UsageError
from mcpfault.protocol.eras import HANDSHAKE_METHODS, EraTracker


@dataclass(frozen=True, slots=True)
class Joining:
    """One of several recorders of one recording (``record --listen -- CMD``: one per protocol era behind
    the HTTP bridge), all writing the same cassette: each adds its sessions to what the others wrote."""

    recording: str  # the recording's id, in the cassette's header: a cassette of another recording is replaced
    epoch: float  # when the recording started (Unix seconds): every part's times count from it


class Recorder:
    """Collects the entries of every session a recording sees; thread-safe (the relay directions add to it).

    On stdio (``session=None`` to ``add``) each handshake request the client sends after the first begins
    a new session: a client that reconnects through the same relay, or the clients the HTTP bridge of
    ``record --listen -- CMD`` passes to one server. Over ``--upstream`` the caller names the session.
    """

    def __init__(self, command: Sequence[str], redact: Sequence[str], joining: Joining | None = None) -> None:
        self._lock = threading.Lock()
        self._joining = joining
        # Times count from the recording's start: this recorder's own, or the one it joins.
        self._started = time.monotonic() - (time.time() - joining.epoch if joining is not None else 0.0)
        self._eras: dict[str, EraTracker] = {}
        self._session = "1"
        self._sessions_begun = 0
        self.command = list(command)
        self.redact = list(redact)
        self.entries: list[Entry] = []
        self._secrets: set[str] = set()
        self.server_info: Any = None
        self.capabilities: Any = None
        self.protocol_versions: list[str] = []
        self.recorded_at = datetime.now(UTC).isoformat(timespec="seconds")

    def new_session(self) -> str:
        """The marker of a session that begins now ("1", "2", ...)."""
        with self._lock:
            return self._begin()

    def _begin(self) -> str:
        self._sessions_begun += 1
        self._session = str(self._sessions_begun)
        return self._session

    def add(self, direction: Direction, line: bytes, session: str | None = None) -> None:
        try:
            message = json.loads(line)
        except ValueError:
            return  # not JSON-RPC (a server's stray output): relayed, not recorded
        if isinstance(message, dict):
            self.add_message(direction, message, session)

    def add_message(
        self, direction: Direction, message: dict[str, Any], session: str | None = None, http: Any = None
    ) -> None:
        with self._lock:
            self._secrets |= secret_values(message, self.redact)
            method = message.get("method")
            if session is None:
                if direction == "client" and method in HANDSHAKE_METHODS and "id" in message:
                    self._begin()
                elif not self._sessions_begun:
                    self._sessions_begun = 1
                session = self._session
            era = self._eras.setdefault(session, EraTracker())
            if direction == "client" and isinstance(method, str):
                params = message.get("params")
                era.observe_request(method, params if isinstance(params, dict) else {})
            result = message.get("result")
            if direction == "server" and isinstance(result, dict) and "serverInfo" in result:
                self.server_info, self.capabilities = result.get("serverInfo"), result.get("capabilities")
                version = result.get("protocolVersion")
                if isinstance(version, str) and version not in self.protocol_versions:
                    self.protocol_versions.append(version)
            version = era.protocol_version
            if version and version not in self.protocol_versions and direction == "client":
                self.protocol_versions.append(version)
            self.entries.append(
                Entry(
                    time.monotonic() - self._started,
                    direction,
                    session,
                    era.era.value,
                    redact_message(message, self.redact, self._secrets),
                    http,
                )
            )

    def header(self) -> dict[str, Any]:
        eras = sorted({entry.era for entry in self.entries} - {"unknown"})
        return {
            "cassette": FORMAT_VERSION,
            "command": redact_message({"c": self.command})["c"],
            "server_info": self.server_info,
            "capabilities": self.capabilities,
            "eras": eras,
            "protocol_versions": self.protocol_versions,
            "recorded_at": self.recorded_at,
            "redacted_arguments": self.redact,
            "sessions": len({entry.session for entry in self.entries}),
            **({"recording": self._joining.recording} if self._joining is not None else {}),
        }

    def save(self, path: Path) -> None:
        """Write the cassette; a session the client sent nothing in leaves an existing one as it was.

        Behind ``record --listen`` the HTTP proxy may start one recorder per protocol era, all writing
        the same file: the one that saw no request must not replace the one that did.
        """
        with self._lock:
            entries = list(self.entries)
            if path.exists() and not any(entry.direction == "client" for entry in entries):
                print(f"mcpfault record: this session sent no request; {path} is kept as it was", file=sys.stderr)
                return
            if self._joining is None:
                write(path, self.header(), entries)
                return
            with _locked(path):
                joined = _earlier_part(path, self._joining.recording)
                if joined is None:
                    write(path, self.header(), entries)
                else:
                    write(path, *_join(joined, self.header(), entries))


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """Hold ``path``'s lock file while a part of the recording is merged in (the parts save at once)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.with_name(path.name + ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _earlier_part(path: Path, recording: str) -> Cassette | None:
    """What another part of this recording already wrote to ``path`` (None: nothing, or another recording's)."""
    if not path.exists():
        return None
    try:
        cassette = load(path)
    except UsageError:
        return None  # not a cassette: this recording replaces it, as a first part would
    return cassette if cassette.header.get("recording") == recording else None


def _join(earlier: Cassette, header: dict[str, Any], entries: list[Entry]) -> tuple[dict[str, Any], list[Entry]]:
    """The cassette of both parts: this part's sessions numbered after the earlier ones, in time order."""
    base = len(earlier.sessions())
    order = {session: str(base + n) for n, session in enumerate(dict.fromkeys(e.session for e in entries), 1)}
    renumbered = [dataclasses.replace(entry, session=order[entry.session]) for entry in entries]
    joined = sorted([*earlier.entries, *renumbered], key=lambda entry: entry.t)
    previous = earlier.header
    merged = {
        **header,
        "server_info": previous.get("server_info") or header["server_info"],
        "capabilities": previous.get("capabilities") or header["capabilities"],
        "eras": sorted({*previous.get("eras", []), *header["eras"]}),
        "protocol_versions": list(
            dict.fromkeys([*previous.get("protocol_versions", []), *header["protocol_versions"]])
        ),
        "recorded_at": previous.get("recorded_at", header["recorded_at"]),
        "sessions": len({entry.session for entry in joined}),
    }
    return merged, joined


def _union(first: list[str], second: list[str]) -> list[str]:
    return list(dict.fromkeys([*first, *second]))


def _pump(source: IO[bytes], sink: IO[bytes], recorder: Recorder, direction: Direction) -> None:
    try:
        for line in iter(source.readline, b""):
            recorder.add(direction, line)
            try:
                sink.write(line)
                sink.flush()
            except (BrokenPipeError, ValueError):
                return
    finally:
        if direction == "client":
            try:
                sink.close()  # the client is done: the server sees EOF, as without the recorder
            except (BrokenPipeError, OSError):
                pass


def record_stdio(
    out: Path, command: Sequence[str], redact: Sequence[str], profile: str | None, joining: Joining | None = None
) -> int:
    """Relay stdio between the client and ``command`` until the server exits; the server's exit status."""
    if not command:
        raise UsageError("record needs the server's command after '--' (e.g. -- uvx mcp-server-time)")
    server = list(command)
    if profile is not None:
        server = mcpfault_argv("proxy", "--config", profile, "--", *command)
    recorder = Recorder(command, redact, joining)
    try:
        child = subprocess.Popen(server, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    except OSError as exc:
        raise UsageError(f"cannot start the server {command[0]!r}: {exc.strerror or exc}") from exc
    assert child.stdin is not None and child.stdout is not None

    def stop(signum: int, frame: FrameType | None) -> None:
        child.terminate()

    signal.signal(signal.SIGTERM, stop)
    client = threading.Thread(target=_pump, args=(sys.stdin.buffer, child.stdin, recorder, "client"), daemon=True)
    client.start()
    try:
        _pump(child.stdout, sys.stdout.buffer, recorder, "server")
        code = child.wait()
    finally:
        recorder.save(out)
    return code
