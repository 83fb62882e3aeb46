"""Five workflows with ground truth, written the way most integration code is written.

The first four use tools only and are what a run does unless told otherwise (``WORKFLOWS``);
``config_audit`` also reads resources and gets a prompt, and runs when named (``--workflows``).

The task code trusts field names and types, as code written against a working server does. That
is the point: whatever protects it from failures has to live at the call boundary (the agent's
policy), so every agent runs exactly this code.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from mcpfault.errors import UsageError
from mcpfault.mock.resources import PROMPT_NAME, compliant, config_uri, device_config
from mcpfault.mock.world import World

WORKFLOWS = ("site_triage", "interface_check", "maintenance_roundtrip", "open_incident")
# Every workflow a run may name: the default four, and the one that reads resources and a prompt.
ALL_WORKFLOWS = (*WORKFLOWS, "config_audit")
# The one task of a run against a server cassette: the user's own instruction, no ground truth, any answer.
CASSETTE_WORKFLOW = "cassette"
HOT_UTILIZATION_PCT = 80.0
HOT_ERRORS_PER_MIN = 50


class Tools(Protocol):
    """What task code calls: the agent's call boundary."""

    async def call(self, tool: str, arguments: Mapping[str, Any]) -> Any: ...

    async def read(self, uri: str) -> Any:
        """A resource's JSON content."""
        ...

    async def prompt(self, name: str, arguments: Mapping[str, str]) -> str:
        """A prompt's text."""
        ...


@dataclass(frozen=True, slots=True)
class TaskSpec:
    index: int  # within its (profile, agent) cell
    workflow: str
    target: str  # a site id (site_triage) or a device id
    tag: str  # unique per task, written into what the task creates so a judge can find it
    instruction: str = ""  # the cassette workflow's instruction (--cassette-task); the others build theirs

    def as_dict(self) -> dict[str, Any]:
        data = {"index": self.index, "workflow": self.workflow, "target": self.target, "tag": self.tag}
        if self.instruction:
            data["instruction"] = self.instruction
        return data


def check_workflows(names: Sequence[str]) -> tuple[str, ...]:
    unknown = [n for n in names if n not in ALL_WORKFLOWS]
    if unknown or not names:
        raise UsageError(
            f"unknown workflow {', '.join(map(repr, unknown)) or '(none given)'}; "
            f"choose from: {', '.join(ALL_WORKFLOWS)}"
        )
    return tuple(names)


def plan_tasks(
    world: World, count: int, seed: int, *, first_index: int = 0, workflows: Sequence[str] = WORKFLOWS
) -> list[TaskSpec]:
    """The same tasks for every agent and profile of a run: workflows in rotation, targets drawn from ``seed``."""
    rng = random.Random(f"tasks:{seed}")
    sites, devices = world.site_ids(), world.device_ids()
    specs = []
    for offset in range(first_index + count):
        workflow = workflows[offset % len(workflows)]
        target = rng.choice(sites) if workflow == "site_triage" else rng.choice(devices)
        if offset >= first_index:
            specs.append(TaskSpec(offset, workflow, target, f"task-{seed}-{offset}"))
    return specs


def cassette_tasks(count: int, instruction: str, *, first_index: int = 0) -> list[TaskSpec]:
    """``count`` trials of the one instruction a server cassette's user gives (--cassette-task)."""
    return [
        TaskSpec(index, CASSETTE_WORKFLOW, "", f"cassette-{index}", instruction)
        for index in range(first_index, first_index + count)
    ]


async def run_task(tools: Tools, spec: TaskSpec) -> Any:
    return await _WORKFLOW_CODE[spec.workflow](tools, spec)


async def site_triage(tools: Tools, spec: TaskSpec) -> list[str]:
    """Which devices at a site need attention? (fan-out reads)"""
    listing = await tools.call("list_devices", {"site_id": spec.target})
    unhealthy = []
    for device in listing["devices"]:
        status = await tools.call("get_device_status", {"device_id": device["device_id"]})
        if status.get("status") in ("degraded", "down"):
            unhealthy.append(device["device_id"])
    return sorted(unhealthy)


async def interface_check(tools: Tools, spec: TaskSpec) -> list[str]:
    """Which interfaces of a device run hot? (numeric thresholds)"""
    metrics = await tools.call("get_interface_metrics", {"device_id": spec.target})
    hot = [
        interface["name"]
        for interface in metrics["interfaces"]
        if interface["oper_status"] == "up"
        and (interface["utilization_pct"] > HOT_UTILIZATION_PCT or interface["errors_per_min"] > HOT_ERRORS_PER_MIN)
    ]
    return sorted(hot)


async def maintenance_roundtrip(tools: Tools, spec: TaskSpec) -> dict[str, bool]:
    """Put a device in maintenance, then confirm by reading it back (read after write)."""
    reason = f"planned work {spec.tag}"
    await tools.call("set_maintenance", {"device_id": spec.target, "enabled": True, "reason": reason})
    status = await tools.call("get_device_status", {"device_id": spec.target})
    maintenance = status.get("maintenance") or {}
    return {"confirmed": maintenance.get("enabled") is True and maintenance.get("reason") == reason}


async def open_incident(tools: Tools, spec: TaskSpec) -> dict[str, str]:
    """Open one incident for a device (a non-idempotent write)."""
    opened = await tools.call(
        "open_incident",
        {"device_id": spec.target, "summary": f"High error rate on uplinks ({spec.tag})", "severity": "high"},
    )
    return {"incident_id": opened["incident_id"]}


async def config_audit(tools: Tools, spec: TaskSpec) -> dict[str, bool]:
    """Open an audit window on a device (maintenance), check its configuration against the baseline,
    and brief the on-call engineer: resource reads around a write, then a prompt."""
    uri = config_uri(spec.target)
    await tools.read(uri)  # the configuration before: what an auditor records first
    reason = f"config audit {spec.tag}"
    await tools.call("set_maintenance", {"device_id": spec.target, "enabled": True, "reason": reason})
    config = await tools.read(uri)
    briefing = await tools.prompt(PROMPT_NAME, {"device_id": spec.target})
    return {
        "window_opened": config["admin_state"] == "maintenance" and config["maintenance_reason"] == reason,
        "compliant": compliant(config),
        "briefed": spec.target in briefing,
    }


# The result fields each workflow's code reads, per tool: a drift that renames any other field changes
# nothing the task uses (analysis.effects). Kept beside the code it describes; a test checks it.
FIELDS_READ: dict[str, dict[str, frozenset[str]]] = {
    "site_triage": {"list_devices": frozenset({"devices", "device_id"}), "get_device_status": frozenset({"status"})},
    "interface_check": {
        "get_interface_metrics": frozenset({"interfaces", "name", "oper_status", "utilization_pct", "errors_per_min"})
    },
    "maintenance_roundtrip": {"get_device_status": frozenset({"maintenance", "enabled", "reason"})},
    "open_incident": {"open_incident": frozenset({"incident_id"})},
    "config_audit": {},  # it reads no tool result; what it reads is the resource's content
}


_WORKFLOW_CODE = {
    "site_triage": site_triage,
    "interface_check": interface_check,
    "maintenance_roundtrip": maintenance_roundtrip,
    "open_incident": open_incident,
    "config_audit": config_audit,
}


def expected_answer(world: World, spec: TaskSpec) -> Any:
    """The right answer from the world as generated (topology never changes), for read workflows.

    Write workflows are judged against the server's final state instead (see the analysis layer).
    """
    if spec.workflow == "site_triage":
        return sorted(d for d in world.device_ids(spec.target) if world.device(d).status in ("degraded", "down"))
    if spec.workflow == "interface_check":
        return sorted(
            i.name
            for i in world.device(spec.target).interfaces
            if i.oper_status == "up"
            and (i.utilization_pct > HOT_UTILIZATION_PCT or i.errors_per_min > HOT_ERRORS_PER_MIN)
        )
    if spec.workflow == "maintenance_roundtrip":
        return {"confirmed": True}
    if spec.workflow == "config_audit":
        # window_opened is judged from the server's state (was the write applied?); the rest is fixed.
        return {"compliant": compliant(device_config(world, spec.target)), "briefed": True}
    return None  # open_incident: the id the server gave, checked against its state
