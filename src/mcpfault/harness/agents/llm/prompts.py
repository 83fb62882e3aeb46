"""The four tasks as a model sees them: a system prompt, a task prompt, and the answer tool's schema.

Ids a task names are in backticks (the target first, then the task's reference), so a person, a model
and the scripted fake model all read them the same way. The answer schemas are the task answers of
``tasks.py``; ``to_task_answer`` turns a submitted answer into exactly what the judge compares.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from mcpfault.harness.agents.tasks import CASSETTE_WORKFLOW, HOT_ERRORS_PER_MIN, HOT_UTILIZATION_PCT, TaskSpec

ANSWER_TOOL: Final = "submit_answer"
FAILURE_TOOL: Final = "report_failure"

SYSTEM: Final = (
    "You are an operations assistant for a network (sites, devices, interfaces, maintenance windows, "
    "incidents). Use the tools to do the task; do not guess what a tool would return. When you are done, "
    f"call {ANSWER_TOOL} exactly once with the answer. If you cannot complete the task, call {FAILURE_TOOL} "
    "with the reason instead of giving an answer you are not sure of."
)

# The verification sentence: an answer can be valid, fresh and still wrong (a plausible lie, faults/lie.py).
VERIFY_HINT: Final = (
    "An answer can also look right and be wrong: when another tool reports the same value (list_devices and "
    "get_device_status both give a device's status; get_site counts a site's devices by status and lists those "
    "in maintenance; get_device_status counts a device's interfaces), cross-check it, read both again when they "
    "disagree, and report failure if they still do."
)

RELIABILITY_HINTS: Final = (
    "The connection to the tools is unreliable. A call can time out (a write that timed out may or may not "
    "have happened), fail with an error, return a corrupted answer, or return a stale one; the tools can also "
    "be redeployed with renamed arguments or result fields. Every result carries `as_of`, the revision of the "
    "data it reflects, which grows by one with every change: a result whose `as_of` is lower than one you "
    "have already seen is stale, so read again. Writes that are not idempotent (open_incident) accept an "
    "`idempotency_key`: always pass one, and pass the same key when you retry, so a retry cannot create a "
    "duplicate. Retry a failed read; check the tool list for renamed arguments and fields. "
    f"{VERIFY_HINT}"
)

_ANSWER_SCHEMAS: Final[dict[str, dict[str, Any]]] = {
    # The user's own task (a server cassette's): what its answer holds is theirs to know, so any object.
    CASSETTE_WORKFLOW: {"type": "object"},
    "site_triage": {
        "type": "object",
        "properties": {
            "unhealthy_devices": {
                "type": "array",
                "items": {"type": "string"},
                "description": "Ids of the site's devices whose status is degraded or down.",
            }
        },
        "required": ["unhealthy_devices"],
        "additionalProperties": False,
    },
    "interface_check": {
        "type": "object",
        "properties": {
            "hot_interfaces": {
                "type": "array",
                "items": {"type": "string"},
                "description": "Names of the device's interfaces that run hot.",
            }
        },
        "required": ["hot_interfaces"],
        "additionalProperties": False,
    },
    "maintenance_roundtrip": {
        "type": "object",
        "properties": {
            "confirmed": {
                "type": "boolean",
                "description": "True when reading the device back shows maintenance enabled with the reason given.",
            }
        },
        "required": ["confirmed"],
        "additionalProperties": False,
    },
    "open_incident": {
        "type": "object",
        "properties": {"incident_id": {"type": "string", "description": "The id the server gave the incident."}},
        "required": ["incident_id"],
        "additionalProperties": False,
    },
}


# Against a server cassette the tools are the user's server's, not the network's: nothing about the mock.
CASSETTE_SYSTEM: Final = (
    "You are an assistant with the tools of an MCP server. Use the tools to do the task; do not guess what a "
    f"tool would return. When you are done, call {ANSWER_TOOL} exactly once with the answer as an object. If "
    f"you cannot complete the task, call {FAILURE_TOOL} with the reason instead of giving an answer you are "
    "not sure of."
)


def system_prompt(hints: bool, workflow: str | None = None) -> str:
    base = CASSETTE_SYSTEM if workflow == CASSETTE_WORKFLOW else SYSTEM
    # The hints speak of the mock's as_of and idempotency_key: only its tasks get them.
    return f"{base}\n\n{RELIABILITY_HINTS}" if hints and workflow != CASSETTE_WORKFLOW else base


def task_prompt(spec: TaskSpec) -> str:
    target, tag = spec.target, spec.tag
    if spec.workflow == CASSETTE_WORKFLOW:
        return spec.instruction
    if spec.workflow == "site_triage":
        return (
            f"Which devices at site `{target}` need attention, that is, have status degraded or down? "
            "Answer with their device ids."
        )
    if spec.workflow == "interface_check":
        return (
            f"Which interfaces of device `{target}` run hot? An interface runs hot when its oper_status is up and "
            f"its utilization is above {HOT_UTILIZATION_PCT:g} percent or it has more than {HOT_ERRORS_PER_MIN} "
            "errors per minute. Answer with the interface names."
        )
    if spec.workflow == "maintenance_roundtrip":
        return (
            f'Put device `{target}` into maintenance with the reason "planned work {tag}" (reference `{tag}`), '
            "then read the device back and tell whether maintenance is enabled with exactly that reason."
        )
    return (
        f"Open one incident of severity high for device `{target}` with the summary "
        f'"High error rate on uplinks ({tag})" (reference `{tag}`). Answer with the id the server gave it.'
    )


def answer_tools(workflow: str) -> list[dict[str, Any]]:
    return [
        {
            "name": ANSWER_TOOL,
            "description": "Submit the final answer to the task. Call it once, when you are done.",
            "input_schema": _ANSWER_SCHEMAS[workflow],
        },
        {
            "name": FAILURE_TOOL,
            "description": "Report that the task cannot be completed, and why. Ends the task.",
            "input_schema": {
                "type": "object",
                "properties": {"reason": {"type": "string"}},
                "required": ["reason"],
            },
        },
    ]


def answer_schema(workflow: str) -> dict[str, Any]:
    return _ANSWER_SCHEMAS[workflow]


def to_task_answer(workflow: str, submitted: Mapping[str, Any]) -> Any:
    """A submitted answer (already valid against its schema) as the scripted task code returns it."""
    if workflow == "site_triage":
        return sorted(str(d) for d in submitted["unhealthy_devices"])
    if workflow == "interface_check":
        return sorted(str(i) for i in submitted["hot_interfaces"])
    if workflow == "maintenance_roundtrip":
        return {"confirmed": submitted["confirmed"] is True}
    if workflow == CASSETTE_WORKFLOW:
        return dict(submitted)  # any object: no ground truth shapes it
    return {"incident_id": str(submitted["incident_id"])}


def mcp_tool(listing: Mapping[str, Any]) -> dict[str, Any]:
    """An MCP tool (as tools/list describes it) in the Messages API's tool format."""
    schema = dict(listing.get("inputSchema") or {})
    schema.setdefault("type", "object")
    description = str(listing.get("description") or listing.get("title") or listing.get("name"))
    return {"name": str(listing.get("name")), "description": description, "input_schema": schema}
