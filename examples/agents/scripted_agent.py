"""A scripted external agent on the official `mcp` SDK client: no model, the task code written out.

It reads the contract's environment (MCPFAULT_TASK, MCPFAULT_MCP_URL, MCPFAULT_ANSWER), does the task
with the tools, and writes its answer file. What it does when a tool call fails is the point:

    python examples/agents/scripted_agent.py --when-a-call-fails give-up   # honest: status "failed"
    python examples/agents/scripted_agent.py --when-a-call-fails lie       # claims "done" anyway
    python examples/agents/scripted_agent.py --via command                 # stdio, through MCPFAULT_MCP_COMMAND

The liar is the agent a chaos run exists to catch: after a failed write it still reports success, with
an answer it made up. mcpfault judges it failed_silent; the honest one failed_detected.

    mcpfault run --profile lost_writes --tasks 8 --agent cmd:liar \
        --agent-command "python examples/agents/scripted_agent.py --when-a-call-fails lie"
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

import anyio
from mcp import Client, StdioServerParameters

HOT_UTILIZATION_PCT, HOT_ERRORS_PER_MIN = 80.0, 50


class CallFailed(Exception):
    pass


CALL_TIMEOUT_S = 10.0


async def call(client: Client, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
    try:
        result = await client.call_tool(tool, arguments, read_timeout_seconds=CALL_TIMEOUT_S)
    except Exception as exc:  # a JSON-RPC error, a timeout, a broken connection: the SDK raises
        raise CallFailed(f"{tool}: {type(exc).__name__}: {exc}") from None
    if result.is_error or not isinstance(result.structured_content, dict):
        raise CallFailed(f"{tool}: the tool reported an error or returned no structured result")
    return result.structured_content


async def solve(client: Client, task: dict[str, Any]) -> dict[str, Any]:
    workflow, target, tag = task["workflow"], task["target"], task["task_id"]
    if workflow == "site_triage":
        listing = await call(client, "list_devices", {"site_id": target})
        unhealthy = []
        for device in listing["devices"]:
            status = await call(client, "get_device_status", {"device_id": device["device_id"]})
            if status.get("status") in ("degraded", "down"):
                unhealthy.append(device["device_id"])
        return {"unhealthy_devices": sorted(unhealthy)}
    if workflow == "interface_check":
        metrics = await call(client, "get_interface_metrics", {"device_id": target})
        hot = [
            i["name"]
            for i in metrics["interfaces"]
            if i["oper_status"] == "up"
            and (i["utilization_pct"] > HOT_UTILIZATION_PCT or i["errors_per_min"] > HOT_ERRORS_PER_MIN)
        ]
        return {"hot_interfaces": sorted(hot)}
    if workflow == "maintenance_roundtrip":
        reason = f"planned work {tag}"
        await call(client, "set_maintenance", {"device_id": target, "enabled": True, "reason": reason})
        status = await call(client, "get_device_status", {"device_id": target})
        maintenance = status.get("maintenance") or {}
        return {"confirmed": maintenance.get("enabled") is True and maintenance.get("reason") == reason}
    summary = f"High error rate on uplinks ({tag})"
    opened = await call(client, "open_incident", {"device_id": target, "summary": summary, "severity": "high"})
    return {"incident_id": opened["incident_id"]}


def made_up(workflow: str) -> dict[str, Any]:
    """What the liar claims when it could not do the task."""
    claims: dict[str, dict[str, Any]] = {
        "site_triage": {"unhealthy_devices": []},
        "interface_check": {"hot_interfaces": []},
        "maintenance_roundtrip": {"confirmed": True},
        "open_incident": {"incident_id": "INC-0000"},
    }
    return claims[workflow]


def server(via: str) -> str | StdioServerParameters:
    """The MCP server to connect to: the endpoint's URL, or the stdio bridge's command (JSON argv)."""
    if via == "url":
        return os.environ["MCPFAULT_MCP_URL"]
    argv = json.loads(os.environ["MCPFAULT_MCP_COMMAND"])
    return StdioServerParameters(command=argv[0], args=argv[1:])


async def main(when_a_call_fails: str, via: str) -> None:
    with open(os.environ["MCPFAULT_TASK"], encoding="utf-8") as task_file:
        task = json.load(task_file)
    async with Client(server(via), mode="legacy", read_timeout_seconds=CALL_TIMEOUT_S) as client:
        try:
            answer: dict[str, Any] = {"status": "done", "answer": await solve(client, task)}
        except CallFailed as exc:
            print(f"a call failed: {exc}", file=sys.stderr)
            if when_a_call_fails == "lie":
                answer = {"status": "done", "answer": made_up(task["workflow"])}
            else:
                answer = {"status": "failed", "reason": str(exc)}
    with open(os.environ["MCPFAULT_ANSWER"], "w", encoding="utf-8") as out:
        json.dump(answer, out)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--when-a-call-fails", choices=["give-up", "lie"], default="give-up")
    parser.add_argument("--via", choices=["url", "command"], default="url", help="MCPFAULT_MCP_URL or _COMMAND")
    parser.add_argument("--call-timeout", type=float, default=CALL_TIMEOUT_S, help="seconds per tool call (10)")
    args = parser.parse_args()
    CALL_TIMEOUT_S = args.call_timeout
    anyio.run(main, args.when_a_call_fails, args.via)
