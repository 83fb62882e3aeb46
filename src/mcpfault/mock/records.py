"""The frozen records a `World` is made of: its fixed topology and the state records it replaces on change.

Pure data, no logic: `generation` builds the first ones from a seed, `world` replaces the state records
as writes arrive (and bumps the revision), `answers` turns any of them into a tool's answer.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final, Literal, get_args

DeviceState = Literal["ok", "degraded", "down"]
OperStatus = Literal["up", "down"]
Role = Literal["core", "edge", "access", "firewall"]
Severity = Literal["critical", "high", "medium", "low"]
WriteOp = Literal["set_maintenance", "open_incident"]

SEVERITIES: Final[tuple[Severity, ...]] = get_args(Severity)
INITIAL_REVISION: Final = 1
# Incident ids start well above 1 so they never look like list indices or revisions.
FIRST_INCIDENT_NUMBER: Final = 1001


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
