"""A deterministic "network operations" world: the ground truth behind the mock MCP server.

Pure: no I/O, no clocks, no global RNG. Everything is derived from the seed through one private
`random.Random`, so a judge can rebuild the exact world a run started from with `World.generate(seed)`
and compare it with the `final_state()` the server wrote when it exited.

The topology (sites, devices, interfaces and their metrics) never changes after generation. Only
maintenance flags and incidents change, and only through the two write methods. Each write that
changes state bumps `revision` by exactly one (like an etcd revision); every answer carries the
revision it was computed at as `as_of`, so a stale answer replayed by a proxy is detectable.
"""

from __future__ import annotations

import dataclasses
import random
from dataclasses import dataclass
from typing import Annotated, Any, Final, Literal, TypedDict, get_args

from mcpfault.errors import MCPFaultError

DeviceState = Literal["ok", "degraded", "down"]
OperStatus = Literal["up", "down"]
Role = Literal["core", "edge", "access", "firewall"]
Severity = Literal["critical", "high", "medium", "low"]
WriteOp = Literal["set_maintenance", "open_incident"]

SEVERITIES: Final[tuple[Severity, ...]] = get_args(Severity)
INITIAL_REVISION: Final = 1
# Incident ids start well above 1 so they never look like list indices or revisions.
FIRST_INCIDENT_NUMBER: Final = 1001

_CITIES: Final[tuple[tuple[str, str, str], ...]] = (
    ("ams", "Amsterdam", "eu-west"),
    ("fra", "Frankfurt", "eu-central"),
    ("lon", "London", "eu-west"),
    ("mad", "Madrid", "eu-south"),
    ("nyc", "New York", "us-east"),
    ("chi", "Chicago", "us-central"),
    ("sfo", "San Francisco", "us-west"),
    ("sao", "Sao Paulo", "sa-east"),
    ("sin", "Singapore", "ap-southeast"),
    ("tyo", "Tokyo", "ap-northeast"),
    ("syd", "Sydney", "ap-southeast"),
)
_MODELS: Final[dict[Role, tuple[str, ...]]] = {
    "core": ("Arista 7280R3", "Juniper MX480", "Cisco ASR 9006"),
    "edge": ("Juniper MX204", "Cisco NCS 540", "Arista 7050X3"),
    "access": ("Cisco Catalyst 9300", "Arista 720XP", "Juniper EX4400"),
    "firewall": ("Palo Alto PA-5220", "Fortinet FortiGate 1800F"),
}
_SPEEDS_GBPS: Final[dict[Role, tuple[int, ...]]] = {
    "core": (40, 100),
    "edge": (10, 40, 100),
    "access": (1, 10),
    "firewall": (10, 40),
}
_STATUS_WEIGHTS: Final[tuple[tuple[DeviceState, int], ...]] = (("ok", 70), ("degraded", 20), ("down", 10))
_INITIAL_SUMMARIES: Final[dict[DeviceState, tuple[str, ...]]] = {
    "degraded": ("Elevated interface errors", "High latency on uplink", "Uplink flapping"),
    "down": ("Device unreachable", "Power supply failure suspected"),
}


class MockWorldError(MCPFaultError):
    """A request the world refuses; the message is written for the agent that sent it."""


class UnknownIdError(MockWorldError, LookupError):
    """A site or device id that does not exist in this world."""


class InvalidArgumentError(MockWorldError, ValueError):
    """An argument outside what the tool accepts (empty summary, unknown severity, ...)."""


# ---- immutable topology -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Interface:
    name: str
    speed_gbps: int
    oper_status: OperStatus
    utilization_pct: float
    errors_per_min: int
    latency_ms: float | None  # None while the interface is down: there is nothing to measure


@dataclass(frozen=True, slots=True)
class Device:
    device_id: str
    site_id: str
    hostname: str
    role: Role
    model: str
    status: DeviceState
    interfaces: tuple[Interface, ...]


@dataclass(frozen=True, slots=True)
class Site:
    site_id: str
    name: str
    region: str
    device_ids: tuple[str, ...]


# ---- mutable state, stored as frozen records replaced on change -----------------------------------


@dataclass(frozen=True, slots=True)
class Maintenance:
    enabled: bool
    reason: str | None  # kept only while enabled, so disabling twice is a no-op whatever the reason
    since_revision: int


@dataclass(frozen=True, slots=True)
class Incident:
    incident_id: str
    device_id: str
    site_id: str
    summary: str
    severity: Severity
    status: Literal["open"]
    idempotency_key: str | None
    opened_revision: int


@dataclass(frozen=True, slots=True)
class WriteRecord:
    """One accepted write call, whether or not it changed state: what a judge counts retries with."""

    op: WriteOp
    arguments: dict[str, Any]
    changed: bool
    revision: int  # the revision after the call


# ---- answers: plain dicts at run time, typed for callers ------------------------------------------
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
        rng = random.Random(seed)
        sites: dict[str, Site] = {}
        devices: dict[str, Device] = {}
        for code, city, region in sorted(rng.sample(_CITIES, rng.randint(4, 6))):
            site_id = f"{code}{rng.randint(1, 3)}"
            roles: list[Role] = ["core", "edge"]
            roles += [rng.choice(("access", "access", "firewall")) for _ in range(rng.randint(1, 4))]
            per_role: dict[Role, int] = {}
            site_devices: list[str] = []
            for role in roles:
                per_role[role] = per_role.get(role, 0) + 1
                device = _generate_device(rng, site_id, role, per_role[role])
                devices[device.device_id] = device
                site_devices.append(device.device_id)
            sites[site_id] = Site(site_id, f"{city} DC{site_id[-1]}", region, tuple(site_devices))

        maintenance = {d: Maintenance(enabled=False, reason=None, since_revision=INITIAL_REVISION) for d in devices}
        # One healthy device starts in maintenance, so "is it already in maintenance?" has a non-trivial answer.
        healthy = [d.device_id for d in devices.values() if d.status == "ok"]
        if healthy:
            planned = rng.choice(healthy)
            maintenance[planned] = Maintenance(True, "Scheduled firmware upgrade", INITIAL_REVISION)

        incidents: list[Incident] = []
        for device in devices.values():
            if device.status != "ok" and rng.random() < 0.5:
                incidents.append(
                    Incident(
                        incident_id=f"INC-{FIRST_INCIDENT_NUMBER + len(incidents)}",
                        device_id=device.device_id,
                        site_id=device.site_id,
                        summary=rng.choice(_INITIAL_SUMMARIES[device.status]),
                        severity="critical" if device.status == "down" else rng.choice(("high", "medium")),
                        status="open",
                        idempotency_key=None,
                        opened_revision=INITIAL_REVISION,
                    )
                )
        return cls(seed, sites, devices, maintenance, incidents)

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
            "sites": [
                {"site_id": s.site_id, "name": s.name, "region": s.region, "device_count": len(s.device_ids)}
                for s in self._sites.values()
            ],
        }

    def get_site(self, site_id: str) -> SiteResult:
        site = self.site(site_id)
        statuses = [self._devices[d].status for d in site.device_ids]
        return {
            "as_of": self._revision,
            "site_id": site.site_id,
            "name": site.name,
            "region": site.region,
            "device_count": len(site.device_ids),
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
            "devices": [_device_summary(self._devices[d]) for d in site.device_ids],
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
            "interfaces": [_interface_info(i) for i in device.interfaces],
        }

    # -- tool logic: writes --

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
            return _incident_result(existing, self._revision, created=False)

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
        return _incident_result(incident, self._revision, created=True)

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


def _generate_device(rng: random.Random, site_id: str, role: Role, number: int) -> Device:
    device_id = f"{site_id}-{role}{number:02d}"
    status: DeviceState = rng.choices([s for s, _ in _STATUS_WEIGHTS], [w for _, w in _STATUS_WEIGHTS])[0]
    count = rng.randint(2, 4)
    speed = rng.choice(_SPEEDS_GBPS[role])
    # A degraded device has at least one unhealthy interface; which one is part of the ground truth.
    sick = rng.randrange(count) if status == "degraded" else -1
    interfaces = tuple(_generate_interface(rng, f"et-0/0/{n}", speed, status, n == sick) for n in range(count))
    return Device(
        device_id=device_id,
        site_id=site_id,
        hostname=f"{device_id}.net.example",
        role=role,
        model=rng.choice(_MODELS[role]),
        status=status,
        interfaces=interfaces,
    )


def _generate_interface(rng: random.Random, name: str, speed: int, status: DeviceState, sick: bool) -> Interface:
    if status == "down" or (sick and rng.random() < 0.3):
        return Interface(name, speed, "down", 0.0, 0, None)
    if sick:
        return Interface(
            name,
            speed,
            "up",
            round(rng.uniform(85.0, 99.5), 1),
            rng.randint(120, 900),
            round(rng.uniform(40.0, 250.0), 2),
        )
    return Interface(
        name,
        speed,
        "up",
        round(rng.uniform(3.0, 70.0), 1),
        rng.randint(0, 5),
        round(rng.uniform(0.2, 6.0), 2),
    )


def _device_summary(device: Device) -> DeviceSummary:
    return {
        "device_id": device.device_id,
        "hostname": device.hostname,
        "role": device.role,
        "model": device.model,
        "status": device.status,
    }


def _interface_info(interface: Interface) -> InterfaceInfo:
    return {
        "name": interface.name,
        "speed_gbps": interface.speed_gbps,
        "oper_status": interface.oper_status,
        "utilization_pct": interface.utilization_pct,
        "errors_per_min": interface.errors_per_min,
        "latency_ms": interface.latency_ms,
    }


def _incident_result(incident: Incident, as_of: int, created: bool) -> IncidentResult:
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


def _as_severity(value: str) -> Severity:
    for severity in SEVERITIES:
        if severity == value:
            return severity
    raise InvalidArgumentError(f"severity must be one of {', '.join(SEVERITIES)}; got {value!r}.")
