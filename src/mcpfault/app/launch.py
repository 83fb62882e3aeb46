"""``Proxy``: an mcpfault proxy with a profile in front of a command, as a context manager.

stdio: the agent launches the proxy itself (``proxy.command`` is the argv to give it as its MCP server);
every launch appends to the same events and spans files, and the control API listens on a port
reserved here, so ``proxy.control`` reaches whichever launch is running. At exit any launch still
alive is ended (SIGTERM, then SIGKILL), so none outlives the ``with`` block.

HTTP: the proxy process starts here (``--listen 127.0.0.1:0``, a port the OS picks) in front of the
command (a stdio server it bridges) or of an ``upstream`` URL; ``proxy.url`` is its MCP endpoint. At
exit it gets SIGTERM, then SIGKILL, and is reaped.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from mcpfault.analysis.traces import proxy_faults
from mcpfault.app import ready
from mcpfault.app.argv import mcpfault_argv
from mcpfault.app.toml_text import toml_text
from mcpfault.control.access import TOKEN_VARIABLE
from mcpfault.control.client import Control
from mcpfault.errors import MCPFaultError, UsageError
from mcpfault.faults import profile as profiles
from mcpfault.protocol.jsonlines import read_jsonl
from mcpfault.proxy.events import START_EVENT, read_events
from mcpfault.telemetry import names
from mcpfault.telemetry.span_files import SpanView, read_spans

Transport = Literal["stdio", "http"]
ProfileSpec = str | os.PathLike[str] | Mapping[str, Any]


class ProxyError(MCPFaultError):
    """The proxy could not be started (its own words follow), or was used before ``start()``."""


@dataclass(frozen=True, slots=True)
class InjectedFault:
    """One fault the proxy injected into one request: from its event record, joined to its span."""

    type: str  # the fault type, e.g. "timeout"
    mode: str | None
    rule: str | None  # the rule's name in the profile
    method: str  # e.g. "tools/call"
    tool: str | None  # the tool's name on tools/call
    request_id: Any  # the JSON-RPC id, as the client sent it
    time: str  # when the event was written (ISO 8601, UTC)
    trace_id: str | None  # the proxy span's ids, when spans were recorded and have been written
    span_id: str | None


class Proxy:
    """An mcpfault proxy with ``profile`` in front of ``command`` (argv list, never a shell line).

    ``profile`` is a bundled name ("error"), a .toml path, or a mapping shaped like a profile file
    (``{"name": ..., "seed": ..., "faults": [{...}, ...]}``). It is validated here, before anything
    starts: a ``ProfileError`` lists every problem. ``transport="http"`` serves Streamable HTTP;
    ``upstream`` (HTTP only) puts the proxy in front of a server's URL instead of a command.
    ``env`` is added to the HTTP proxy process's environment (a stdio launch has the agent's).
    ``probe`` (``"ebpf"``, root; or ``"fake:EVENTS.json"``) records each tool call's side effects, as
    ``mcpfault proxy --probe``, with ``probe_policy`` (a TOML file) saying where the server may write.
    """

    def __init__(
        self,
        command: Sequence[str] | None = None,
        *,
        profile: ProfileSpec = "baseline",
        transport: Transport = "stdio",
        upstream: str | None = None,
        seed: int | None = None,
        workdir: str | os.PathLike[str] | None = None,
        control: bool = True,
        env: Mapping[str, str] | None = None,
        start_timeout_s: float = 30.0,
        stop_timeout_s: float = 10.0,
        probe: str | None = None,
        probe_policy: str | os.PathLike[str] | None = None,
    ) -> None:
        if transport not in ("stdio", "http"):
            raise UsageError(f"transport {transport!r}: give 'stdio' or 'http'")
        argv = [str(part) for part in command] if command is not None else []
        if isinstance(command, str):
            raise UsageError(f"command {command!r} is a string; give an argv list, e.g. ['mcpfault', 'mock-server']")
        if upstream is not None and (transport != "http" or argv):
            raise UsageError("upstream= is for transport='http' without a command")
        if not argv and upstream is None:
            raise UsageError("give the server's command (an argv list), or upstream= with transport='http'")
        self.transport: Transport = transport
        self.server_command = argv
        self.upstream = upstream
        self.seed = seed
        self._profile_spec = profile
        self._workdir_given = workdir is not None
        self._workdir_arg = Path(workdir).resolve() if workdir is not None else None
        self._want_control = control
        self._env = dict(env) if env is not None else None
        self._start_timeout_s = start_timeout_s
        self._probe = [] if probe is None else ["--probe", str(probe)]
        if probe_policy is not None:
            self._probe += ["--probe-policy", os.fspath(probe_policy)]
        self._stop_timeout_s = stop_timeout_s
        self._process: subprocess.Popen[bytes] | None = None
        self._log: Any = None
        self._closed = False
        self._snapshot: tuple[list[dict[str, Any]], list[SpanView]] | None = None
        self.workdir: Path | None = None
        self.profile_path: Path | None = None
        self.command: list[str] | None = None  # stdio: what the agent launches as its MCP server
        self.url: str | None = None  # http: the proxy's MCP endpoint
        self.control: Control | None = None
        self.control_url: str | None = None

    # -- life -------------------------------------------------------------------------------------

    def __enter__(self) -> Proxy:
        self.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        where = self.url or (" ".join(self.command) if self.command else "not started")
        return f"<Proxy {self.transport} profile={self.profile_path} {where}>"

    def start(self) -> Proxy:
        if self.workdir is not None:
            raise ProxyError("this Proxy was started already; make a new one")
        self.workdir = self._workdir_arg or Path(tempfile.mkdtemp(prefix="mcpfault-proxy-"))
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.profile_path = self._profile_file(self.workdir)
        base = mcpfault_argv("proxy", "--config", str(self.profile_path), "--no-summary")
        base += ["--events", str(self.events_path), "--spans", str(self.spans_path)]
        if self.seed is not None:
            base += ["--seed", str(int(self.seed))]
        base += self._probe
        if self.transport == "stdio":
            if self._want_control:
                self.control_url = f"http://127.0.0.1:{_free_port()}"
                base += ["--control", self.control_url.removeprefix("http://")]
                self.control = Control(self.control_url, token=self._control_token())
            self.command = [*base, "--", *self.server_command]
            return self
        self._start_http(base)
        return self

    def close(self) -> None:
        """Stop everything this proxy started (and any stdio launch still running); idempotent."""
        if self._closed or self.workdir is None:
            self._closed = True
            return
        self._closed = True
        try:
            if self._process is not None:
                _end(self._process, self._stop_timeout_s)
            else:
                self._end_stdio_launches()
        finally:
            if self._log is not None:
                self._log.close()
            self._snapshot = (self._read_events(), self._read_spans())
            if not self._workdir_given:
                shutil.rmtree(self.workdir, ignore_errors=True)

    # -- records ----------------------------------------------------------------------------------

    @property
    def events_path(self) -> Path:
        return self._dir() / "events.jsonl"

    @property
    def spans_path(self) -> Path:
        return self._dir() / "spans.jsonl"

    def events(self) -> list[dict[str, Any]]:
        """The request records so far (every launch's), as ``--events`` writes them."""
        return self._snapshot[0] if self._snapshot is not None else self._read_events()

    def spans(self) -> list[SpanView]:
        """The proxy's spans written so far (they reach the file in batches, and all of them at exit)."""
        return self._snapshot[1] if self._snapshot is not None else self._read_spans()

    def faults(self) -> list[InjectedFault]:
        """Every fault injected so far, in order, each with its request and (when written) its span."""
        spans = self.spans()
        used: set[str] = set()
        found: list[InjectedFault] = []
        for record in self.events():
            applied = record.get("faults") or (
                [{"rule": record.get("rule"), "type": record["fault_type"], "mode": record.get("fault_mode")}]
                if record.get("fault_type")
                else []
            )
            for fault in applied:
                span = _span_of(spans, record, str(fault["type"]), used)
                found.append(
                    InjectedFault(
                        type=str(fault["type"]),
                        mode=fault.get("mode"),
                        rule=fault.get("rule"),
                        method=str(record.get("method")),
                        tool=record.get("tool"),
                        request_id=record.get("request_id"),
                        time=str(record.get("time", "")),
                        trace_id=span.trace_id if span else None,
                        span_id=span.span_id if span else None,
                    )
                )
        return found

    def injected(self, fault_type: str | None = None) -> int:
        """How many faults were injected (of ``fault_type`` only, when given): ``proxy.injected("timeout") >= 1``."""
        return sum(1 for fault in self.faults() if fault_type is None or fault.type == fault_type)

    def faults_for(self, tool: str) -> list[InjectedFault]:
        """The faults injected into calls of ``tool``, in order."""
        return [fault for fault in self.faults() if fault.tool == tool]

    def fault_for(self, tool: str) -> InjectedFault | None:
        """The first fault injected into a call of ``tool``, or None when its calls went untouched."""
        faults = self.faults_for(tool)
        return faults[0] if faults else None

    # -- inside -----------------------------------------------------------------------------------

    def _dir(self) -> Path:
        if self.workdir is None:
            raise ProxyError("the Proxy is not started; use 'with Proxy(...) as proxy:' or call start()")
        return self.workdir

    def _profile_file(self, workdir: Path) -> Path:
        spec = self._profile_spec
        if isinstance(spec, Mapping):
            document = dict(spec)
            document.setdefault("name", "api")
            profiles.from_mapping(document, source="profile=")  # every problem, before anything starts
            path = workdir / "profile.toml"
            path.write_text(toml_text(document), encoding="utf-8")
            return path
        path = profiles.resolve(os.fspath(spec)).resolve()
        profiles.load(path)
        return path

    def _start_http(self, base: list[str]) -> None:
        ready_path = self._dir() / "ready.json"
        ready_path.unlink(missing_ok=True)  # one left by a killed proxy in this directory is not this one's
        command = [*base, "--listen", "127.0.0.1:0", "--ready-file", str(ready_path)]
        if self._want_control:
            command += ["--control", "127.0.0.1:0"]
        command += ["--upstream", self.upstream] if self.upstream else ["--", *self.server_command]
        log_path = self._dir() / "proxy.log"
        self._log = log_path.open("wb")
        env = {**os.environ, **self._env} if self._env is not None else None
        self._process = subprocess.Popen(
            command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=self._log, env=env
        )
        process = self._process
        try:
            readiness = ready.wait_for(
                ready_path, exited=lambda: process.poll() is not None, timeout_s=self._start_timeout_s, pid=process.pid
            )
        except ready.ReadyFileError as exc:
            said = log_path.read_text(encoding="utf-8", errors="replace").strip()  # before close() removes it
            self.close()
            raise ProxyError(f"{exc}; it said:\n{said or '(nothing)'}") from None
        self.url = readiness.listen
        if readiness.control is not None:
            self.control_url = readiness.control
            self.control = Control(self.control_url, token=self._control_token())

    def _control_token(self) -> str | None:
        """The token the proxy's control API will ask for (MCPFAULT_CONTROL_TOKEN in its environment)."""
        environment = {**os.environ, **(self._env or {})}
        return environment.get(TOKEN_VARIABLE) or None

    def _end_stdio_launches(self) -> None:
        """Launches of ``command`` still running (the agent did not end them): SIGTERM, then SIGKILL."""
        marker = str(self.events_path).encode()
        alive = []
        for row in read_jsonl(self.events_path) if self.events_path.exists() else []:
            pid = row.get("pid") if isinstance(row, dict) and row.get("event") == START_EVENT else None
            if isinstance(pid, int) and marker in _cmdline(pid):
                alive.append(pid)
        for pid in alive:
            _signal(pid, signal.SIGTERM)
        deadline = time.monotonic() + self._stop_timeout_s
        while alive and time.monotonic() < deadline:
            alive = [pid for pid in alive if marker in _cmdline(pid)]
            time.sleep(0.05)
        for pid in alive:
            _signal(pid, signal.SIGKILL)

    def _read_events(self) -> list[dict[str, Any]]:
        return read_events(self.events_path) if self.events_path.exists() else []

    def _read_spans(self) -> list[SpanView]:
        return read_spans(self.spans_path) if self.spans_path.exists() else []


def _span_of(spans: list[SpanView], record: Mapping[str, Any], fault_type: str, used: set[str]) -> SpanView | None:
    """The proxy span of this request that carries this fault (each span is matched once)."""
    request_id = str(record.get("request_id"))
    for span in spans:
        if span.span_id in used or str(span.attributes.get(names.JSONRPC_REQUEST_ID)) != request_id:
            continue
        if span.attributes.get(names.MCP_METHOD_NAME) != record.get("method"):
            continue
        if fault_type in {type_name for type_name, _mode in proxy_faults(span)}:
            used.add(span.span_id)
            return span
    return None


def _free_port() -> int:
    """A loopback port free now (the OS's pick), for a control API the agent's launch will bind."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()  # empty for a zombie: nothing left to end
    except OSError:
        return b""


def _signal(pid: int, signum: signal.Signals) -> None:
    try:
        os.kill(pid, signum)
    except ProcessLookupError:
        pass


def _end(process: subprocess.Popen[bytes], timeout_s: float) -> None:
    if process.poll() is None:
        process.terminate()  # the proxy ends its server and flushes events and spans on SIGTERM
        try:
            process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(5)
