"""Actions on a live mcpfault proxy. Each says what undoes it (put that in ``rollbacks``).

Arguments are plain JSON values, as Chaos Toolkit passes them; ``configuration`` and ``secrets``
are injected by Chaos Toolkit (``mcpfault_control_url``, and the ``mcpfault_control_token`` secret).
"""

import os
import subprocess
import sys
import tempfile
from typing import Any

import anyio
from chaoslib.exceptions import ActivityFailed
from chaoslib.types import Configuration, Secrets

from chaosmcpfault._client import MCP_URL_KEY, answer, calling, control

__all__ = [
    "add_fault",
    "remove_fault",
    "disable_faults",
    "enable_faults",
    "reset_faults",
    "crash_server",
    "stall_server",
    "restart_server",
    "call_tool",
    "run_bench",
]

MAX_STALL_S = 600.0
MAX_CALLS = 10_000
MAX_BENCH_TASKS = 1000
MAX_BENCH_S = 3600.0


def add_fault(rule: dict[str, Any], configuration: Configuration = None, secrets: Secrets = None) -> dict[str, Any]:
    """Add one fault rule to the live proxy: ``rule`` is one ``[[faults]]`` table as a mapping
    (``{"name": "down", "type": "error", "mode": "tool", "tools": ["list_sites"]}``), validated as
    ``mcpfault validate`` does. Returns the rule as the proxy holds it.

    Rollback: ``remove_fault`` with the same ``name`` (or ``reset_faults``)."""
    if not isinstance(rule, dict):
        raise ActivityFailed(f"add_fault: rule must be one [[faults]] table as a mapping, got {type(rule).__name__}")
    return calling("add_fault", lambda: control(configuration, secrets).add(rule))


def remove_fault(name: str, configuration: Configuration = None, secrets: Secrets = None) -> dict[str, Any]:
    """Remove the rule called ``name`` (run-time or from the profile).

    Rollback: ``reset_faults`` brings back a rule of the profile; a run-time rule needs ``add_fault``."""
    return answer(calling("remove_fault", lambda: control(configuration, secrets).remove(name)))


def disable_faults(configuration: Configuration = None, secrets: Secrets = None) -> dict[str, Any]:
    """The kill switch: no rule fires from now on; the rules stay.

    Rollback: ``enable_faults``."""
    return answer(calling("disable_faults", lambda: control(configuration, secrets).off()))


def enable_faults(configuration: Configuration = None, secrets: Secrets = None) -> dict[str, Any]:
    """Switch faults back on after ``disable_faults``.

    Rollback: ``disable_faults``."""
    return answer(calling("enable_faults", lambda: control(configuration, secrets).on()))


def reset_faults(configuration: Configuration = None, secrets: Secrets = None) -> dict[str, Any]:
    """Back to the profile as loaded: run-time rules removed, changes undone, faults on (counters kept).
    The rollback of every fault change, in one step.

    Rollback: none (it is the state the proxy started in)."""
    return answer(calling("reset_faults", lambda: control(configuration, secrets).reset()))


def crash_server(
    signal: str = "SIGKILL", configuration: Configuration = None, secrets: Secrets = None
) -> dict[str, Any]:
    """Send ``signal`` (SIGKILL unless given, e.g. SIGTERM, SIGSEGV) to the proxy's MCP server process.
    Returns the pid signalled and its generation.

    Rollback: ``restart_server``, where the proxy supervises the server; a supervised server with
    ``[server] restart`` comes back by itself."""
    return calling("crash_server", lambda: control(configuration, secrets).crash(signal))


def stall_server(duration_s: float, configuration: Configuration = None, secrets: Secrets = None) -> dict[str, Any]:
    """Freeze the server process for ``duration_s`` seconds (SIGSTOP, then SIGCONT; at most 600).

    Rollback: none needed; the proxy sends SIGCONT when the time is up, and when it stops."""
    if not isinstance(duration_s, int | float) or not 0 < duration_s <= MAX_STALL_S:
        raise ActivityFailed(f"stall_server: duration_s must be seconds in (0, {MAX_STALL_S:g}], got {duration_s!r}")
    return calling("stall_server", lambda: control(configuration, secrets).stall(float(duration_s)))


def restart_server(configuration: Configuration = None, secrets: Secrets = None) -> dict[str, Any]:
    """Restart the server process (where the proxy supervises it: the stdio proxy). Returns the new
    generation and pid.

    Rollback: none (a fresh process is the state after a restart)."""
    return calling("restart_server", lambda: control(configuration, secrets).restart())


def call_tool(
    tool: str,
    arguments: dict[str, Any] | None = None,
    count: int = 1,
    timeout_s: float = 10.0,
    configuration: Configuration = None,
) -> dict[str, Any]:
    """Load: call ``tool`` ``count`` times (at most 10000) through the proxy's MCP endpoint
    (configuration ``mcpfault_mcp_url``, an HTTP proxy's URL), each call bounded by ``timeout_s``.
    Returns how many calls there were and how many ended in an error, a tool error or no answer.

    Rollback: none (the calls' effects are the server's; the bundled mock's reads change nothing)."""
    url = (configuration or {}).get(MCP_URL_KEY)
    if not url:
        raise ActivityFailed(f"call_tool: set configuration key {MCP_URL_KEY!r} to the proxy's MCP endpoint URL")
    if not isinstance(count, int) or not 1 <= count <= MAX_CALLS:
        raise ActivityFailed(f"call_tool: count must be an integer in [1, {MAX_CALLS}], got {count!r}")
    return anyio.run(_calls, str(url), tool, arguments or {}, count, float(timeout_s))


async def _calls(url: str, tool: str, arguments: dict[str, Any], count: int, timeout_s: float) -> dict[str, Any]:
    from mcp import Client, MCPError

    tallies = {"calls": 0, "ok": 0, "tool_errors": 0, "errors": 0, "timeouts": 0}
    async with Client(url, read_timeout_seconds=timeout_s) as client:
        for _ in range(count):
            tallies["calls"] += 1
            try:
                with anyio.fail_after(timeout_s):
                    result = await client.call_tool(tool, arguments)
            except MCPError:
                tallies["errors"] += 1
            except TimeoutError:
                tallies["timeouts"] += 1
            else:
                tallies["tool_errors" if result.is_error else "ok"] += 1
    return tallies


def run_bench(
    profiles: str = "error",
    agents: str = "naive,resilient",
    tasks: int = 20,
    seed: int = 0,
    *,
    out_dir: str | None = None,
    timeout_s: float = 600.0,
) -> dict[str, Any]:
    """Run ``mcpfault bench`` (its own proxies and mock servers; at most 1000 tasks per cell and an
    hour) and return its run directory and the tasks by outcome; ``task_outcome_rate`` reads it.

    Rollback: none; it changes nothing but its output directory."""
    if not isinstance(tasks, int) or not 1 <= tasks <= MAX_BENCH_TASKS:
        raise ActivityFailed(f"run_bench: tasks must be an integer in [1, {MAX_BENCH_TASKS}], got {tasks!r}")
    if not 0 < timeout_s <= MAX_BENCH_S:
        raise ActivityFailed(f"run_bench: timeout_s must be in (0, {MAX_BENCH_S:g}], got {timeout_s!r}")
    from mcpfault.api import task_outcomes

    run_dir = out_dir or tempfile.mkdtemp(prefix="mcpfault-bench-")
    command = [sys.executable, "-m", "mcpfault", "bench", "--profiles", str(profiles), "--agents", str(agents)]
    command += ["--tasks", str(tasks), "--session-tasks", str(min(tasks, 20)), "--seed", str(int(seed))]
    command += ["--out", run_dir, "--jobs", str(max(1, (os.cpu_count() or 1)))]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired:
        raise ActivityFailed(f"run_bench: not finished after {timeout_s:g} s (output so far in {run_dir})") from None
    if done.returncode != 0:
        raise ActivityFailed(f"run_bench: mcpfault bench exited {done.returncode}: {done.stderr.strip()[-2000:]}")
    return {"run_dir": run_dir, "outcomes": dict(task_outcomes(run_dir))}
