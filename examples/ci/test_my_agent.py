"""Test an agent under faults in CI with mcpfault's pytest plugin (docs/tutorials/ci-pytest.md).

``count_devices`` stands for your agent's tool code: it asks the server for its sites and adds up
their devices. The contract under test is the one a user cares about: when a tool fails, or answers
in a shape the agent does not know, the agent says so instead of answering a number it never saw.
Run it with ``pytest examples/ci``.
"""

from __future__ import annotations

from typing import Any

import anyio
import pytest
from mcp import Client, StdioServerParameters, stdio_client

PROFILE_ERRORS = {
    "seed": 7,
    "faults": [{"name": "sites-fail", "type": "error", "mode": "tool", "tools": ["list_sites"], "probability": 1.0}],
}
# The server is redeployed with a renamed field and does not say so: the silent-failure trap.
PROFILE_RENAMED = {
    "seed": 7,
    "faults": [
        {
            "name": "renamed",
            "type": "schema_drift",
            "tools": ["list_sites"],
            "rename_fields": {"device_count": "devices"},
        }
    ],
}


class ToolFailed(RuntimeError):
    """The agent's way of saying it could not answer (a detected failure, not a silent one)."""


async def count_devices(server_command: list[str]) -> int:
    server = StdioServerParameters(command=server_command[0], args=server_command[1:])
    async with Client(stdio_client(server)) as client:
        result = await client.call_tool("list_sites", {})
    # Judged outside the client's task group, so a ToolFailed reaches the caller as itself.
    if result.is_error:
        raise ToolFailed(f"list_sites failed: {result.content}")
    sites: list[dict[str, Any]] = (result.structured_content or {}).get("sites", [])
    # ``site.get("device_count", 0)`` would turn a renamed field into a silent 0.
    missing = [site.get("site_id") for site in sites if not isinstance(site.get("device_count"), int)]
    if missing:
        raise ToolFailed(f"list_sites answered without device_count for {missing}")
    return sum(site["device_count"] for site in sites)


def run_agent(server_command: list[str]) -> int:
    return anyio.run(count_devices, server_command)


def test_the_agent_answers_without_faults(mcpfault_proxy: Any) -> None:
    proxy = mcpfault_proxy(profile="baseline")
    assert run_agent(proxy.command) > 0
    assert proxy.faults() == []


@pytest.mark.mcpfault(profile=PROFILE_ERRORS)
def test_a_failing_tool_is_reported_not_hidden(mcpfault_proxy: Any) -> None:
    proxy = mcpfault_proxy()
    with pytest.raises(ToolFailed, match="list_sites failed"):
        run_agent(proxy.command)
    # The fault really reached the agent: the proxy's own record says which request got it.
    fault = proxy.fault_for("list_sites")
    assert fault is not None and fault.type == "error"
    assert proxy.injected("error") == 1


@pytest.mark.mcpfault(profile=PROFILE_RENAMED)
def test_a_renamed_field_is_noticed(mcpfault_proxy: Any) -> None:
    proxy = mcpfault_proxy()
    with pytest.raises(ToolFailed, match="without device_count"):
        run_agent(proxy.command)
    fault = proxy.fault_for("list_sites")
    assert fault is not None and fault.type == "schema_drift"
