"""A deterministic "network operations" world: the ground truth behind the mock MCP server.

Pure: no I/O, no clocks, no global RNG. Everything is derived from the seed through one private
`random.Random`, so a judge can rebuild the exact world a run started from with `World.generate(seed)`
and compare it with the `final_state()` the server wrote when it exited.

The topology (sites, devices, interfaces and their metrics) never changes after generation. Only
maintenance flags and incidents change, and only through the two write methods. Each write that
changes state bumps `revision` by exactly one (like an etcd revision); every answer carries the
revision it was computed at as `as_of`, so a stale answer replayed by a proxy is detectable.

The world's parts live beside it: `records` (the frozen records), `generation` (everything drawn from
the seed) and `answers` (the result shapes). Their public names are re-exported here.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Final

from mcpfault.errors import MCPFaultError
from mcpfault.mock.answers import (
    AsOf,
    DeviceListResult,
    DeviceStatusResult,
    DeviceSummary,
    IncidentResult,
    InterfaceInfo,
    InterfaceMetricsResult,
    MaintenanceInfo,
    SetMaintenanceResult,
    SiteListResult,
    SiteResult,
    SiteSummary,
    StatusCounts,
    device_summary,
    incident_result,
    interface_info,
    site_summary,
)
from mcpfault.mock.generation import generate
from mcpfault.mock.records import (
    FIRST_INCIDENT_NUMBER,
    INITIAL_REVISION,
    SEVERITIES,
    Device,
    DeviceState,
    Incident,
    Interface,
    Maintenance,
    OperStatus,
    Role,
    Severity,
    Site,
    WriteOp,
    WriteRecord,
)

__all__ = [
    # the world and its refusals
    "World",
    "MockWorldError",
    "UnknownIdError",
    "InvalidArgumentError",
    # records (`mcpfault.mock.records`)
    "DeviceState",
    "OperStatus",
    "Role",
    "Severity",
    "WriteOp",
    "SEVERITIES",
    "INITIAL_REVISION",
    "FIRST_INCIDENT_NUMBER",
    "Interface",
    "Device",
    "Site",
    "Maintenance",
    "Incident",
    "WriteRecord",
    # result shapes (`mcpfault.mock.answers`)
    "AsOf",
    "SiteSummary",
    "SiteListResult",
    "StatusCounts",
    "SiteResult",
    "DeviceSummary",
    "DeviceListResult",
    "MaintenanceInfo",
    "DeviceStatusResult",
    "InterfaceInfo",
    "InterfaceMetricsResult",
    "SetMaintenanceResult",
    "IncidentResult",
]


class MockWorldError(MCPFaultError):
    """A request the world refuses; the message is written for the agent that sent it."""


class UnknownIdError(MockWorldError, LookupError):
    """A site or device id that does not exist in this world."""


class InvalidArgumentError(MockWorldError, ValueError):
    """An argument outside what the tool accepts (empty summary, unknown severity, ...)."""


# ---- the world ------------------------------------------------------------------------------------


class World:
    """Sites, devices, interfaces (fixed at generation) plus maintenance and incidents (mutable).

    Not thread-safe: the server calls it from one thread, one request at a time.
    """

    def __init__(
        self,
        seed: int,
        sites: dict[str, Site],
        devices: dict[str, Device],
        maintenance: dict[str, Maintenance],
        incidents: list[Incident],
    ) -> None:
        self.seed: Final = seed
        self._sites = sites
        self._devices = devices
        self._maintenance = maintenance
        self._incidents = incidents
        self._by_key: dict[str, Incident] = {i.idempotency_key: i for i in incidents if i.idempotency_key}
        self._next_incident = FIRST_INCIDENT_NUMBER + len(incidents)
        self._revision = INITIAL_REVISION
        self._log: list[WriteRecord] = []

    # -- generation --

    @classmethod
    def generate(cls, seed: int) -> World:
        start = generate(seed)
        return cls(seed, start.sites, start.devices, start.maintenance, start.incidents)

    # -- read accessors for judges and tests (immutable records or copies) --

    @property
    def revision(self) -> int:
        return self._revision

    @property
    def writes(self) -> int:
        """Accepted write calls, including those that changed nothing (idempotent repeats, de-duplicated keys)."""
        return len(self._log)

    def site_ids(self) -> list[str]:
        return list(self._sites)

    def device_ids(self, site_id: str | None = None) -> list[str]:
        if site_id is None:
            return list(self._devices)
        return list(self.site(site_id).device_ids)

    def site(self, site_id: str) -> Site:
        try:
            return self._sites[site_id]
        except KeyError:
            valid = ", ".join(self._sites)
            raise UnknownIdError(
                f"Unknown site_id {site_id!r}. Valid site ids: {valid} (call list_sites to see them)."
            ) from None

    def device(self, device_id: str) -> Device:
        try:
            return self._devices[device_id]
        except KeyError:
            raise UnknownIdError(
                f"Unknown device_id {device_id!r}. Call list_sites, then list_devices(site_id) to see valid device ids."
            ) from None

    def maintenance(self, device_id: str) -> Maintenance:
        self.device(device_id)
        return self._maintenance[device_id]

    def incidents(self, device_id: str | None = None) -> list[Incident]:
        return [i for i in self._incidents if device_id is None or i.device_id == device_id]

    def write_log(self) -> list[WriteRecord]:
        return list(self._log)

    # -- tool logic: reads --

    def list_sites(self) -> SiteListResult:
        return {
            "as_of": self._revision,
            "sites": [site_summary(s) for s in self._sites.values()],
        }

    def get_site(self, site_id: str) -> SiteResult:
        site = self.site(site_id)
        statuses = [self._devices[d].status for d in site.device_ids]
        return {
            "as_of": self._revision,
            **site_summary(site),
            "status_counts": {
                "ok": statuses.count("ok"),
                "degraded": statuses.count("degraded"),
                "down": statuses.count("down"),
            },
            "devices_in_maintenance": [d for d in site.device_ids if self._maintenance[d].enabled],
            "open_incident_ids": [i.incident_id for i in self._incidents if i.site_id == site_id],
        }

    def list_devices(self, site_id: str) -> DeviceListResult:
        site = self.site(site_id)
        return {
            "as_of": self._revision,
            "site_id": site.site_id,
            "devices": [device_summary(self._devices[d]) for d in site.device_ids],
        }

    def get_device_status(self, device_id: str) -> DeviceStatusResult:
        device = self.device(device_id)
        maintenance = self._maintenance[device_id]
        return {
            "as_of": self._revision,
            "device_id": device.device_id,
            "site_id": device.site_id,
            "hostname": device.hostname,
            "role": device.role,
            "model": device.model,
            "status": device.status,
            "interfaces_up": sum(1 for i in device.interfaces if i.oper_status == "up"),
            "interfaces_total": len(device.interfaces),
            "maintenance": {"enabled": maintenance.enabled, "reason": maintenance.reason},
            "open_incident_ids": [i.incident_id for i in self.incidents(device_id)],
        }

    def get_interface_metrics(self, device_id: str) -> InterfaceMetricsResult:
        device = self.device(device_id)
        return {
            "as_of": self._revision,
            "device_id": device.device_id,
            "interfaces": [interface_info(i) for i in device.interfaces],
        }

    # -- tool logic: writes --
    # (FIELDS_CHANGED_BY below says which answer fields each write changes: keep it with them.)

    def set_maintenance(self, device_id: str, enabled: bool, reason: str) -> SetMaintenanceResult:
        """Idempotent: a call that leaves (enabled, reason) as they were changes nothing, revision included."""
        self.device(device_id)
        reason = reason.strip()
        if enabled and not reason:
            raise InvalidArgumentError("reason must not be empty when enabling maintenance.")
        current = self._maintenance[device_id]
        wanted_reason = reason if enabled else None
        changed = (current.enabled, current.reason) != (enabled, wanted_reason)
        if changed:
            self._revision += 1
            self._maintenance[device_id] = Maintenance(enabled, wanted_reason, self._revision)
        self._record("set_maintenance", {"device_id": device_id, "enabled": enabled, "reason": reason}, changed)
        final = self._maintenance[device_id]
        return {
            "as_of": self._revision,
            "device_id": device_id,
            "enabled": final.enabled,
            "reason": final.reason,
            "changed": changed,
        }

    def open_incident(
        self, device_id: str, summary: str, severity: str, idempotency_key: str | None = None
    ) -> IncidentResult:
        """Not idempotent: every call opens a new incident, unless `idempotency_key` was seen before.

        A repeated key returns the incident it first created (even if the other arguments differ),
        with `created: false`, and changes nothing.
        """
        device = self.device(device_id)
        summary = summary.strip()
        if not summary:
            raise InvalidArgumentError("summary must not be empty.")
        checked_severity = _as_severity(severity)
        if idempotency_key is not None and not idempotency_key.strip():
            raise InvalidArgumentError("idempotency_key must be omitted or a non-empty string.")
        arguments = {
            "device_id": device_id,
            "summary": summary,
            "severity": severity,
            "idempotency_key": idempotency_key,
        }
        existing = self._by_key.get(idempotency_key) if idempotency_key is not None else None
        if existing is not None:
            self._record("open_incident", arguments, changed=False)
            return incident_result(existing, self._revision, created=False)

        self._revision += 1
        incident = Incident(
            incident_id=f"INC-{self._next_incident}",
            device_id=device_id,
            site_id=device.site_id,
            summary=summary,
            severity=checked_severity,
            status="open",
            idempotency_key=idempotency_key,
            opened_revision=self._revision,
        )
        self._next_incident += 1
        self._incidents.append(incident)
        if idempotency_key is not None:
            self._by_key[idempotency_key] = incident
        self._record("open_incident", arguments, changed=True)
        return incident_result(incident, self._revision, created=True)

    def _record(self, op: WriteOp, arguments: dict[str, Any], changed: bool) -> None:
        self._log.append(WriteRecord(op, arguments, changed, self._revision))

    # -- whole-world views --

    def final_state(self) -> dict[str, Any]:
        """The mutable state a judge checks after a run: JSON-able, stable key order."""
        return {
            "seed": self.seed,
            "revision": self._revision,
            "writes": self.writes,
            "state_changes": sum(1 for r in self._log if r.changed),
            "incidents": [dataclasses.asdict(i) for i in self._incidents],
            "maintenance": {
                d: {"enabled": m.enabled, "reason": m.reason, "since_revision": m.since_revision}
                for d, m in self._maintenance.items()
            },
            "write_log": [dataclasses.asdict(r) for r in self._log],
        }

    def snapshot(self) -> dict[str, Any]:
        """Everything, topology included: equal snapshots mean equal worlds."""
        return {
            **self.final_state(),
            "sites": [dataclasses.asdict(s) for s in self._sites.values()],
            "devices": [dataclasses.asdict(d) for d in self._devices.values()],
        }


# ---- helpers --------------------------------------------------------------------------------------


def _as_severity(value: str) -> Severity:
    for severity in SEVERITIES:
        if severity == value:
            return severity
    raise InvalidArgumentError(f"severity must be one of {', '.join(SEVERITIES)}; got {value!r}.")


# The answer fields each write op changes (of any tool's or resource's answer): what decides whether a
# stale answer older than a write differs from the fresh one in something a task reads (analysis.effects).
FIELDS_CHANGED_BY: dict[str, frozenset[str]] = {
    "set_maintenance": frozenset(
        {"maintenance", "enabled", "reason", "devices_in_maintenance", "admin_state", "maintenance_reason"}
    ),
    "open_incident": frozenset({"open_incident_ids", "incidents", "incident_id"}),
}
