"""The tools' answers: one TypedDict per result shape, and how a record becomes one.

Answers are plain dicts at run time, built with their keys in the order the fields are declared here.
That order is part of the wire format (each outputSchema, and the JSON text of every tool result): the
benchmark's outcome counts depend on it, so a shape does not inherit another's fields.
"""

from __future__ import annotations

from typing import Annotated, Literal, TypedDict

from mcpfault.mock.records import Device, DeviceState, Incident, Interface, OperStatus, Role, Severity, Site

# ---- result shapes -------------------------------------------------------------------------------
#
# These TypedDicts are the one definition of each tool's result shape: the server derives every
# outputSchema from them (`mcpfault.mock.schema`). A string in `Annotated[...]` is the field's description.
# Every object schema gets `additionalProperties: false`, so a drifted answer fails client validation.

AsOf = Annotated[int, "State revision this answer reflects; it grows by one on every change."]


class SiteSummary(TypedDict):
    site_id: str
    name: str
    region: str
    device_count: int


class SiteListResult(TypedDict):
    as_of: AsOf
    sites: list[SiteSummary]


class StatusCounts(TypedDict):
    ok: int
    degraded: int
    down: int


class SiteResult(TypedDict):
    as_of: AsOf
    site_id: str
    name: str
    region: str
    device_count: int
    status_counts: Annotated[StatusCounts, "Devices at the site by status."]
    devices_in_maintenance: Annotated[list[str], "Ids of devices currently in maintenance."]
    open_incident_ids: list[str]


class DeviceSummary(TypedDict):
    device_id: str
    hostname: str
    role: Role
    model: str
    status: DeviceState


class DeviceListResult(TypedDict):
    as_of: AsOf
    site_id: str
    devices: list[DeviceSummary]


class MaintenanceInfo(TypedDict):
    enabled: bool
    reason: Annotated[str | None, "Why the device is in maintenance; null when it is not."]


class DeviceStatusResult(TypedDict):
    as_of: AsOf
    device_id: str
    site_id: str
    hostname: str
    role: Role
    model: str
    status: DeviceState
    interfaces_up: int
    interfaces_total: int
    maintenance: MaintenanceInfo
    open_incident_ids: list[str]


class InterfaceInfo(TypedDict):
    name: str
    speed_gbps: int
    oper_status: OperStatus
    utilization_pct: Annotated[float, "Percent of line rate in use, 0-100."]
    errors_per_min: int
    latency_ms: Annotated[float | None, "Round-trip latency to the peer; null while the interface is down."]


class InterfaceMetricsResult(TypedDict):
    as_of: AsOf
    device_id: str
    interfaces: list[InterfaceInfo]


class SetMaintenanceResult(TypedDict):
    as_of: AsOf
    device_id: str
    enabled: bool
    reason: str | None
    changed: Annotated[bool, "False when the device was already in the requested state."]


class IncidentResult(TypedDict):
    as_of: AsOf
    incident_id: str
    device_id: str
    site_id: str
    summary: str
    severity: Severity
    status: Literal["open"]
    idempotency_key: str | None
    opened_revision: int
    created: Annotated[bool, "False when idempotency_key matched an incident opened earlier."]


# ---- records to answers --------------------------------------------------------------------------


def site_summary(site: Site) -> SiteSummary:
    return {"site_id": site.site_id, "name": site.name, "region": site.region, "device_count": len(site.device_ids)}


def device_summary(device: Device) -> DeviceSummary:
    return {
        "device_id": device.device_id,
        "hostname": device.hostname,
        "role": device.role,
        "model": device.model,
        "status": device.status,
    }


def interface_info(interface: Interface) -> InterfaceInfo:
    return {
        "name": interface.name,
        "speed_gbps": interface.speed_gbps,
        "oper_status": interface.oper_status,
        "utilization_pct": interface.utilization_pct,
        "errors_per_min": interface.errors_per_min,
        "latency_ms": interface.latency_ms,
    }


def incident_result(incident: Incident, as_of: int, created: bool) -> IncidentResult:
    return {
        "as_of": as_of,
        "incident_id": incident.incident_id,
        "device_id": incident.device_id,
        "site_id": incident.site_id,
        "summary": incident.summary,
        "severity": incident.severity,
        "status": incident.status,
        "idempotency_key": incident.idempotency_key,
        "opened_revision": incident.opened_revision,
        "created": created,
    }
