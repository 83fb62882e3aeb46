"""``--probe ebpf|fake:EVENTS.json``: check, start the sidecar and build the observer, before the server starts."""

from __future__ import annotations

import os
import shlex
from pathlib import Path
from typing import Any

from mcpfault.app.argv import mcpfault_argv
from mcpfault.errors import UsageError

PROBE_BIN_VARIABLE = "MCPFZ_PROBE_BIN"  # the same variable mcp-server-fuzzer reads: another sidecar binary


def parse(spec: str) -> tuple[str, Path | None]:
    """(backend, events file) from ``ebpf`` or ``fake:EVENTS.json``."""
    if spec == "ebpf":
        return "ebpf", None
    backend, _, path = spec.partition(":")
    if backend == "fake" and path:
        return "fake", Path(path)
    raise UsageError(f"--probe {spec!r}: give ebpf, or fake:EVENTS.json (scripted events, no root needed)")


def sidecar_command(backend: str, events_file: Path | None) -> list[str]:
    binary = os.environ.get(PROBE_BIN_VARIABLE)
    command = shlex.split(binary) if binary else mcpfault_argv("probe-sidecar")
    command += ["--backend", backend]
    if events_file is not None:
        command += ["--events-file", str(events_file)]
    return command


def check(spec: str) -> tuple[str, Path | None]:
    """``parse``, then what can be checked before anything starts: the events file, eBPF's needs (root,
    bpftrace, tracefs). A UsageError (exit 2) with the one clear line otherwise."""
    backend, events_file = parse(spec)
    if events_file is not None and not events_file.is_file():
        raise UsageError(f"--probe fake:{events_file}: no such file")
    if backend == "ebpf" and PROBE_BIN_VARIABLE not in os.environ:
        from mcpfault.probe import ebpf

        ebpf.preflight()
    return backend, events_file


def start(spec: str, *, policy_file: Path | None, profile: Path | None, events: Any) -> Any:
    """A started ProbeObserver; a UsageError (exit 2) for anything that keeps the probe from running."""
    backend, events_file = check(spec)  # the one clear line, before the sidecar or the server starts
    try:
        from mcpfault.probe import policy as policies
        from mcpfault.probe.monitor import ProbeMonitor, SidecarFailed
        from mcpfault.probe.observer import ProbeObserver
    except ImportError as exc:  # pragma: no cover - the probe extra not installed
        raise UsageError(f"--probe needs the probe extra: pip install 'mcpfault[probe]' ({exc})") from None
    if policy_file is not None:
        policy = policies.load_file(policy_file)
    else:
        policy = (policies.from_profile(profile) if profile is not None else None) or policies.from_mapping({}, "")
    monitor = ProbeMonitor(sidecar_command(backend, events_file))
    try:
        monitor.start_and_wait()
    except (SidecarFailed, OSError) as exc:
        monitor.close()
        raise UsageError(f"--probe {spec}: {exc}") from None
    return ProbeObserver(monitor, policy, events=events)
