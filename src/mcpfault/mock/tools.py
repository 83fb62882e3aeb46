"""The mock server's seven tools: what `tools/list` publishes and how `tools/call` reaches the `World`.

Each tool names a TypedDict for its arguments (below) and one for its result (in `answers`); both
schemas are derived from them once, at import (`mcpfault.mock.schema`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Annotated, Any, Final, NotRequired, TypedDict

from mcpfault.mock.answers import (
    DeviceListResult,
    DeviceStatusResult,
    IncidentResult,
    InterfaceMetricsResult,
    SetMaintenanceResult,
    SiteListResult,
    SiteResult,
)
from mcpfault.mock.records import Severity
from mcpfault.mock.schema import json_schema
from mcpfault.mock.world import World

SiteId = Annotated[str, "Site id exactly as returned by list_sites."]
DeviceId = Annotated[str, "Device id exactly as returned by list_devices."]


class NoArguments(TypedDict):
    pass


class SiteArguments(TypedDict):
    site_id: SiteId


class DeviceArguments(TypedDict):
    device_id: DeviceId


class SetMaintenanceArguments(TypedDict):
    device_id: DeviceId
    enabled: Annotated[bool, "True to put the device in maintenance, false to end it."]
    reason: Annotated[str, "Why; required when enabling."]


class OpenIncidentArguments(TypedDict):
    device_id: DeviceId
    summary: Annotated[str, "One line describing the problem."]
    severity: Annotated[Severity, "How bad it is."]
    idempotency_key: NotRequired[
        Annotated[str | None, "Optional client-chosen key; a repeated key returns the first incident instead."]
    ]


# Tool annotations (MCP hints). None of the tools destroys anything or reaches outside the simulated world.
READ: Final = {"readOnlyHint": True, "idempotentHint": True, "destructiveHint": False, "openWorldHint": False}
IDEMPOTENT_WRITE: Final = {**READ, "readOnlyHint": False}
WRITE: Final = {**IDEMPOTENT_WRITE, "idempotentHint": False}


@dataclass(frozen=True, slots=True)
class Tool:
    name: str
    title: str
    description: str
    annotations: Mapping[str, bool]
    input_schema: dict[str, Any]
    output_schema: dict[str, Any]
    # Called with arguments already checked against input_schema.
    call: Callable[[World, Any], Mapping[str, Any]]

    def listing(self) -> dict[str, Any]:
        """This tool as `tools/list` describes it."""
        return {
            "name": self.name,
            "title": self.title,
            "description": self.description,
            "inputSchema": self.input_schema,
            "outputSchema": self.output_schema,
            "annotations": dict(self.annotations),
        }


def _tool(
    name: str,
    title: str,
    description: str,
    *,
    annotations: Mapping[str, bool],
    arguments: object,
    result: object,
    call: Callable[[World, Any], Mapping[str, Any]],
) -> Tool:
    return Tool(name, title, description, annotations, json_schema(arguments), json_schema(result), call)


def _list_sites(world: World, args: NoArguments) -> SiteListResult:
    return world.list_sites()


def _get_site(world: World, args: SiteArguments) -> SiteResult:
    return world.get_site(args["site_id"])


def _list_devices(world: World, args: SiteArguments) -> DeviceListResult:
    return world.list_devices(args["site_id"])


def _get_device_status(world: World, args: DeviceArguments) -> DeviceStatusResult:
    return world.get_device_status(args["device_id"])


def _get_interface_metrics(world: World, args: DeviceArguments) -> InterfaceMetricsResult:
    return world.get_interface_metrics(args["device_id"])


def _set_maintenance(world: World, args: SetMaintenanceArguments) -> SetMaintenanceResult:
    return world.set_maintenance(args["device_id"], args["enabled"], args["reason"])


def _open_incident(world: World, args: OpenIncidentArguments) -> IncidentResult:
    return world.open_incident(args["device_id"], args["summary"], args["severity"], args.get("idempotency_key"))


TOOLS: Final[dict[str, Tool]] = {
    tool.name: tool
    for tool in (
        _tool(
            "list_sites",
            "List sites",
            "List every site (data center) with its region and device count.",
            annotations=READ,
            arguments=NoArguments,
            result=SiteListResult,
            call=_list_sites,
        ),
        _tool(
            "get_site",
            "Get site",
            "Summarise one site: device counts by status, devices in maintenance, open incidents.",
            annotations=READ,
            arguments=SiteArguments,
            result=SiteResult,
            call=_get_site,
        ),
        _tool(
            "list_devices",
            "List devices",
            "List the devices at a site with role, model and status (ok, degraded or down).",
            annotations=READ,
            arguments=SiteArguments,
            result=DeviceListResult,
            call=_list_devices,
        ),
        _tool(
            "get_device_status",
            "Get device status",
            "Status of one device: health, interfaces up, maintenance flag and open incidents.",
            annotations=READ,
            arguments=DeviceArguments,
            result=DeviceStatusResult,
            call=_get_device_status,
        ),
        _tool(
            "get_interface_metrics",
            "Get interface metrics",
            "Per-interface metrics of one device: oper status, utilization, errors per minute, latency.",
            annotations=READ,
            arguments=DeviceArguments,
            result=InterfaceMetricsResult,
            call=_get_interface_metrics,
        ),
        _tool(
            "set_maintenance",
            "Set maintenance",
            "Put a device into maintenance or take it out. Idempotent: repeating the same call changes nothing.",
            annotations=IDEMPOTENT_WRITE,
            arguments=SetMaintenanceArguments,
            result=SetMaintenanceResult,
            call=_set_maintenance,
        ),
        _tool(
            "open_incident",
            "Open incident",
            "Open a new incident on a device. NOT idempotent: each call opens another incident unless the "
            "idempotency_key was used before, in which case the earlier incident is returned with created=false.",
            annotations=WRITE,
            arguments=OpenIncidentArguments,
            result=IncidentResult,
            call=_open_incident,
        ),
    )
}
