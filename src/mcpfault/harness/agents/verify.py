"""Cross-checks: a value an answer carries, compared with what a second source says of it.

A plausible lie (faults/lie.py) breaks no schema and carries a fresh ``as_of``: validation and the
freshness check pass it. What catches it is a second source: the mock's tools overlap, so a value one
tool answers is often also in another's answer (a device's status in ``list_devices`` and in
``get_device_status``; a site's device count in ``get_site``; a maintenance reason in the device's
configuration resource). The ``resilient`` policy's ``verify``
mechanism reads the second source and compares; on a disagreement it reads both again, takes the
answer when the two now agree, and refuses it (:class:`Inconsistent`) when they still do not.

What a second source cannot see stays unchecked: no tool repeats an interface's utilization, so a
scaled ``utilization_pct`` passes. A check is pure: it names its source and compares two answers;
reading is the agent's job.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from mcpfault.errors import CallError
from mcpfault.mock.resources import config_uri


class Inconsistent(CallError):
    """Two sources still disagree on a value after both were read again: no answer is trustworthy."""

    failure = "inconsistent"


@dataclass(frozen=True, slots=True)
class Source:
    """The tool call (or, with ``uri``, the resource) whose answer a check compares with; ``fetch``
    false: only when the task already read it."""

    tool: str
    arguments: Mapping[str, Any]
    fetch: bool = True
    uri: str | None = None

    @property
    def key(self) -> tuple[str, str]:
        return call_key(self.tool, self.arguments) if self.uri is None else ("resources/read", self.uri)


@dataclass(frozen=True, slots=True)
class Check:
    tool: str
    # The source for this call and answer (None: nothing to compare with, e.g. an answer without the key).
    source: Callable[[Mapping[str, Any], Mapping[str, Any]], Source | None]
    # What disagrees, in words; empty when the two agree.
    compare: Callable[[Mapping[str, Any], Mapping[str, Any]], list[str]]
    # The answer's fields it vouches for: a check runs only when the task reads one of them (a value
    # the answer does not depend on is not worth a read, nor a refusal when it is wrong).
    fields: frozenset[str]


def _site_of_listing(arguments: Mapping[str, Any], answer: Mapping[str, Any]) -> Source | None:
    site = answer.get("site_id", arguments.get("site_id"))
    return Source("get_site", {"site_id": site}) if isinstance(site, str) else None


def _listing_against_site(listing: Mapping[str, Any], site: Mapping[str, Any]) -> list[str]:
    devices = listing.get("devices")
    if not isinstance(devices, list):
        return []
    found = []
    if isinstance(site.get("device_count"), int) and site["device_count"] != len(devices):
        found.append(f"list_devices lists {len(devices)} devices, get_site counts {site['device_count']}")
    counts = site.get("status_counts")
    if isinstance(counts, dict):
        listed = Counter(d.get("status") for d in devices if isinstance(d, dict))
        for status, count in sorted(counts.items()):
            if isinstance(count, int) and listed.get(status, 0) != count:
                found.append(f"list_devices has {listed.get(status, 0)} {status} devices, get_site counts {count}")
    return found


def _listing_of_device(arguments: Mapping[str, Any], answer: Mapping[str, Any]) -> Source | None:
    site = answer.get("site_id")
    # Only a listing the task already read: listing a whole site to check one status costs more than it buys.
    return Source("list_devices", {"site_id": site}, fetch=False) if isinstance(site, str) else None


def _status_against_listing(status: Mapping[str, Any], listing: Mapping[str, Any]) -> list[str]:
    device = status.get("device_id")
    entries = [d for d in listing.get("devices") or [] if isinstance(d, dict) and d.get("device_id") == device]
    if not entries:
        return [f"get_device_status places {device} at {status.get('site_id')}, whose list_devices does not list it"]
    if "status" not in status or "status" not in entries[0]:
        return []
    listed = entries[0]["status"]
    if listed != status["status"]:
        return [f"get_device_status says {device} is {status['status']!r}, list_devices says {listed!r}"]
    return []


def _site_of_device(arguments: Mapping[str, Any], answer: Mapping[str, Any]) -> Source | None:
    site = answer.get("site_id")
    return Source("get_site", {"site_id": site}) if isinstance(site, str) else None


def _maintenance_against_site(status: Mapping[str, Any], site: Mapping[str, Any]) -> list[str]:
    device, maintenance = status.get("device_id"), status.get("maintenance")
    in_maintenance = site.get("devices_in_maintenance")
    if not isinstance(maintenance, dict) or not isinstance(in_maintenance, list):
        return []
    enabled = maintenance.get("enabled") is True
    if enabled != (device in in_maintenance):
        said = "in maintenance" if enabled else "not in maintenance"
        return [f"get_device_status says {device} is {said}, get_site says the opposite"]
    return []


def _config_of_device(arguments: Mapping[str, Any], answer: Mapping[str, Any]) -> Source | None:
    device, maintenance = answer.get("device_id"), answer.get("maintenance")
    # A reason matters only to a device in maintenance; reading every device's configuration would not pay.
    if not isinstance(device, str) or not isinstance(maintenance, dict) or maintenance.get("enabled") is not True:
        return None
    return Source("", {}, uri=config_uri(device))


def _maintenance_against_config(status: Mapping[str, Any], config: Mapping[str, Any]) -> list[str]:
    maintenance = status.get("maintenance")
    if not isinstance(maintenance, dict) or "maintenance_reason" not in config:
        return []
    if maintenance.get("reason") != config["maintenance_reason"]:
        device = status.get("device_id")
        return [
            f"get_device_status gives {device} the maintenance reason {maintenance.get('reason')!r}, "
            f"its configuration {config['maintenance_reason']!r}"
        ]
    return []


def _status_of_metrics(arguments: Mapping[str, Any], answer: Mapping[str, Any]) -> Source | None:
    device = answer.get("device_id", arguments.get("device_id"))
    return Source("get_device_status", {"device_id": device}) if isinstance(device, str) else None


def _metrics_against_status(metrics: Mapping[str, Any], status: Mapping[str, Any]) -> list[str]:
    interfaces = metrics.get("interfaces")
    if not isinstance(interfaces, list):
        return []
    found = []
    total, up = status.get("interfaces_total"), status.get("interfaces_up")
    if isinstance(total, int) and total != len(interfaces):
        found.append(f"get_interface_metrics lists {len(interfaces)} interfaces, get_device_status counts {total}")
    listed_up = sum(1 for i in interfaces if isinstance(i, dict) and i.get("oper_status") == "up")
    if isinstance(up, int) and up != listed_up:
        found.append(f"get_interface_metrics has {listed_up} interfaces up, get_device_status counts {up}")
    return found


CHECKS: tuple[Check, ...] = (
    Check("list_devices", _site_of_listing, _listing_against_site, frozenset({"devices", "device_id", "status"})),
    Check("get_device_status", _listing_of_device, _status_against_listing, frozenset({"status"})),
    Check("get_device_status", _site_of_device, _maintenance_against_site, frozenset({"maintenance", "enabled"})),
    Check("get_device_status", _config_of_device, _maintenance_against_config, frozenset({"maintenance", "reason"})),
    Check(
        "get_interface_metrics", _status_of_metrics, _metrics_against_status, frozenset({"interfaces", "oper_status"})
    ),
)


def checks_for(tool: str, reads: frozenset[str] | None = None) -> list[Check]:
    """The checks of ``tool``'s answers; with ``reads`` (the fields the task reads), those that vouch for one."""
    return [c for c in CHECKS if c.tool == tool and (reads is None or c.fields & reads)]


def call_key(tool: str, arguments: Mapping[str, Any]) -> tuple[str, str]:
    """A call's identity within a task: its tool and its arguments, whatever their order."""
    return tool, repr(sorted(arguments.items()))
