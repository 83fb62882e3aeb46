"""Seeded generation: everything a `World` starts from, derived from the seed alone.

All randomness of the mock world is here, drawn from one private `random.Random(seed)` in a fixed
order (topology, then the planned maintenance, then the initial incidents). Changing that order, a
table, or a range changes every world, and with it the benchmark's outcome counts.
"""

from __future__ import annotations

import random
from typing import Final, NamedTuple

from mcpfault.mock.records import (
    FIRST_INCIDENT_NUMBER,
    INITIAL_REVISION,
    Device,
    DeviceState,
    Incident,
    Interface,
    Maintenance,
    Role,
    Site,
)

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


class Generated(NamedTuple):
    """What `World.generate(seed)` starts from: the topology and the state at `INITIAL_REVISION`."""

    sites: dict[str, Site]
    devices: dict[str, Device]
    maintenance: dict[str, Maintenance]
    incidents: list[Incident]


def generate(seed: int) -> Generated:
    rng = random.Random(seed)
    sites, devices = _generate_topology(rng)
    maintenance = _initial_maintenance(rng, devices)
    incidents = _initial_incidents(rng, devices)
    return Generated(sites, devices, maintenance, incidents)


def _generate_topology(rng: random.Random) -> tuple[dict[str, Site], dict[str, Device]]:
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
    return sites, devices


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


def _initial_maintenance(rng: random.Random, devices: dict[str, Device]) -> dict[str, Maintenance]:
    maintenance = {d: Maintenance(enabled=False, reason=None, since_revision=INITIAL_REVISION) for d in devices}
    # One healthy device starts in maintenance, so "is it already in maintenance?" has a non-trivial answer.
    healthy = [d.device_id for d in devices.values() if d.status == "ok"]
    if healthy:
        planned = rng.choice(healthy)
        maintenance[planned] = Maintenance(True, "Scheduled firmware upgrade", INITIAL_REVISION)
    return maintenance


def _initial_incidents(rng: random.Random, devices: dict[str, Device]) -> list[Incident]:
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
    return incidents
