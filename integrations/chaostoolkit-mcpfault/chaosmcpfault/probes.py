"""Probes of a live mcpfault proxy (its control API), and of a finished run directory."""

from typing import Any

from chaoslib.exceptions import ActivityFailed
from chaoslib.types import Configuration, Secrets

from chaosmcpfault._client import calling, control

__all__ = ["fault_counts", "request_stats", "error_rate", "server_alive", "task_outcome_rate"]

# What a client got for a faulted request that counts as a failure it saw (see the proxy's events).
FAILED = ("error", "tool_error", "malformed", "nothing", "http_error", "upstream_exited", "server_restarted")


def fault_counts(configuration: Configuration = None, secrets: Secrets = None) -> dict[str, Any]:
    """Faults injected so far: ``total``, ``by_type`` and ``by_rule`` (each live rule's injected count)."""
    proxy = control(configuration, secrets)
    status = calling("fault_counts", proxy.status)
    rules = calling("fault_counts", proxy.faults)
    by_rule = {rule["name"]: rule["injected"] for rule in rules["faults"]}
    return {"total": status["faults_total"], "by_type": status["faults"], "by_rule": by_rule}


def request_stats(configuration: Configuration = None, secrets: Secrets = None) -> dict[str, Any]:
    """Requests so far (``requests_total``, by method), faults (``faults_total``, by type), what
    clients got for faulted requests (``received``), whether faults are on, and the rule count."""
    status = calling("request_stats", control(configuration, secrets).status)
    keys = ("requests_total", "requests", "faults_total", "faults", "received", "faults_enabled", "rules")
    return {key: status.get(key) for key in keys}


def error_rate(configuration: Configuration = None, secrets: Secrets = None) -> float:
    """The share of all requests so far that a fault turned into a failure the client saw (a JSON-RPC
    error, a tool error, no answer); 0.0 before any request."""
    status = calling("error_rate", control(configuration, secrets).status)
    received = status.get("received") or {}
    failed = sum(count for kind, count in received.items() if kind in FAILED)
    total = status["requests_total"]
    return round(failed / total, 6) if total else 0.0


def server_alive(configuration: Configuration = None, secrets: Secrets = None) -> bool:
    """Whether the proxy's MCP server process is running now (False between a crash and a restart,
    and for a proxy in front of an upstream URL, whose process it does not own)."""
    server = calling("server_alive", control(configuration, secrets).status).get("server")
    return bool(server and server.get("pid"))


def task_outcome_rate(
    run_dir: str, outcome: str = "success", profile: str | None = None, agent: str | None = None
) -> float:
    """The share of a finished bench run's tasks (``run_bench``'s ``run_dir``) with this outcome
    (success, recovered, failed_detected, failed_silent), of one profile or agent when given."""
    from mcpfault.api import UsageError, task_outcomes

    try:
        counts = task_outcomes(run_dir, profile=profile, agent=agent)
    except UsageError as exc:
        raise ActivityFailed(f"task_outcome_rate: {exc}") from None
    total = sum(counts.values())
    if not total:
        raise ActivityFailed(f"task_outcome_rate: no tasks in {run_dir} for profile={profile!r} agent={agent!r}")
    return round(counts[outcome] / total, 6)
