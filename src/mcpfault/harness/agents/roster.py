"""Every agent by name, the ablations of ``resilient`` among them, and the one place that makes one."""

from __future__ import annotations

import random

from mcpfault.errors import UsageError
from mcpfault.harness.agents.policies import DEFAULT_TASK_DEADLINE_S, Agent, RetryOnly
from mcpfault.harness.agents.resilient import MECHANISMS, Resilient
from mcpfault.harness.client import StdioClient

AGENT_NAMES = ("naive", "retry-only", "resilient", *(f"resilient-no-{m}" for m in MECHANISMS))


def disabled_mechanisms(name: str) -> frozenset[str] | None:
    """The mechanisms ``resilient-no-a[-no-b...]`` switches off, or None when ``name`` is no such ablation."""
    if not name.startswith("resilient-no-"):
        return None
    parts = name.removeprefix("resilient-no-").split("-no-")
    return frozenset(parts) if all(part in MECHANISMS for part in parts) else None


def make_agent(
    name: str, client: StdioClient, rng: random.Random, task_deadline_s: float = DEFAULT_TASK_DEADLINE_S
) -> Agent:
    if name == "naive":
        return Agent(client, rng, task_deadline_s=task_deadline_s)
    if name == "retry-only":
        return RetryOnly(client, rng, task_deadline_s=task_deadline_s)
    if name == "resilient":
        return Resilient(client, rng, task_deadline_s=task_deadline_s)
    disabled = disabled_mechanisms(name)
    if disabled:
        return Resilient(client, rng, disabled, task_deadline_s=task_deadline_s)
    raise _unknown(name)


def check_agent_name(name: str) -> str:
    if name not in AGENT_NAMES and not disabled_mechanisms(name):
        raise _unknown(name)
    return name


def _unknown(name: str) -> UsageError:
    return UsageError(
        f"unknown agent {name!r}; choose from: {', '.join(AGENT_NAMES)} (or several off: resilient-no-a-no-b)"
    )
