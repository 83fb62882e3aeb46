"""The mock server's resources and prompt: device configurations, incidents, and ``incident_summary``.

- ``netops://devices/{device_id}/config``: a device's configuration as JSON, with ``as_of`` (the
  revision it was read at, as every tool answer has). Its ``admin_state`` follows the device's
  maintenance flag, so a write changes it and a stale read of it is wrong. The rest is derived from
  the seed and the device id (a hash, not the world's RNG: the world stays what it was).
- ``netops://incidents/{incident_id}``: one per incident; opening one changes the resource list
  (``notifications/resources/list_changed``).
- Subscriptions: after a write that changes a subscribed configuration, ``notifications/resources/updated``.
- The prompt ``incident_summary(device_id, incident_id?)``: a user message built from the device's state.

Pure over a ``World`` (no I/O); the session sends what ``changes`` returns.
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Mapping
from typing import Any, Final

from mcpfault.errors import MCPFaultError
from mcpfault.mock import jsontext
from mcpfault.mock.world import UnknownIdError, World

CONFIG_TEMPLATE: Final = "netops://devices/{device_id}/config"
INCIDENT_TEMPLATE: Final = "netops://incidents/{incident_id}"
_CONFIG_PREFIX, _CONFIG_SUFFIX = "netops://devices/", "/config"
_INCIDENT_PREFIX = "netops://incidents/"
JSON_MIME: Final = "application/json"
# What a compliant configuration has: an auditor checks these (tasks.config_audit).
APPROVED_NTP: Final = ("10.0.0.1", "10.0.0.2")
REQUIRED_SSH_VERSION: Final = 2
PROMPT_NAME: Final = "incident_summary"
PROMPT: Final = {
    "name": PROMPT_NAME,
    "title": "Incident summary",
    "description": "A summary request for one device's incident, with the device's current state.",
    "arguments": [
        {"name": "device_id", "description": "Device id exactly as returned by list_devices.", "required": True},
        {"name": "incident_id", "description": "The incident to summarize; all open ones when left out."},
    ],
}


class ResourceNotFound(MCPFaultError, LookupError):
    """A URI the server has no resource for (answered -32602, as 2026-07-28 asks)."""


def config_uri(device_id: str) -> str:
    return f"{_CONFIG_PREFIX}{device_id}{_CONFIG_SUFFIX}"


def device_config(world: World, device_id: str) -> dict[str, Any]:
    """The configuration of ``device_id`` now; ``as_of`` is the world's revision."""
    device = world.device(device_id)
    maintenance = world.maintenance(device_id)
    drawn = zlib.crc32(f"{world.seed}:config:{device_id}".encode())
    return {
        "as_of": world.revision,
        "device_id": device_id,
        "hostname": device.hostname,
        "admin_state": "maintenance" if maintenance.enabled else "in_service",
        "maintenance_reason": maintenance.reason,
        # About one device in five drifted from the baseline: an unapproved NTP server or SSH version 1.
        "ntp_servers": [APPROVED_NTP[0], "192.0.2.123" if drawn % 10 == 3 else APPROVED_NTP[1]],
        "ssh_version": 1 if drawn % 10 == 7 else REQUIRED_SSH_VERSION,
        "syslog_host": f"syslog.{device.site_id}.netops.example",
    }


def compliant(config: Mapping[str, Any]) -> bool:
    """Whether a configuration meets the baseline (the NTP servers approved, SSH version 2)."""
    servers = config.get("ntp_servers")
    approved = isinstance(servers, list) and all(server in APPROVED_NTP for server in servers)
    return approved and config.get("ssh_version") == REQUIRED_SSH_VERSION


def list_resources(world: World) -> list[dict[str, Any]]:
    configs = [
        {
            "uri": config_uri(d),
            "name": f"{world.device(d).hostname} config",
            "mimeType": JSON_MIME,
        }
        for d in world.device_ids()
    ]
    incidents = [
        {"uri": f"{_INCIDENT_PREFIX}{i.incident_id}", "name": f"incident {i.incident_id}", "mimeType": JSON_MIME}
        for i in world.incidents()
    ]
    return configs + incidents


def list_templates() -> list[dict[str, Any]]:
    return [
        {"uriTemplate": CONFIG_TEMPLATE, "name": "device config", "mimeType": JSON_MIME},
        {"uriTemplate": INCIDENT_TEMPLATE, "name": "incident", "mimeType": JSON_MIME},
    ]


def read(world: World, uri: str) -> dict[str, Any]:
    """The resources/read result for ``uri``; raises ResourceNotFound."""
    content: dict[str, Any]
    try:
        if uri.startswith(_CONFIG_PREFIX) and uri.endswith(_CONFIG_SUFFIX):
            content = device_config(world, uri[len(_CONFIG_PREFIX) : -len(_CONFIG_SUFFIX)])
        elif uri.startswith(_INCIDENT_PREFIX):
            wanted = uri[len(_INCIDENT_PREFIX) :]
            found = next((i for i in world.incidents() if i.incident_id == wanted), None)
            if found is None:
                raise ResourceNotFound(uri)
            content = {"as_of": world.revision, **_incident(found)}
        else:
            raise ResourceNotFound(uri)
    except UnknownIdError:
        raise ResourceNotFound(uri) from None
    return {"contents": [{"uri": uri, "mimeType": JSON_MIME, "text": jsontext.indented(content)}]}


def _incident(incident: Any) -> dict[str, Any]:
    return {
        "incident_id": incident.incident_id,
        "device_id": incident.device_id,
        "summary": incident.summary,
        "severity": incident.severity,
        "status": incident.status,
    }


def get_prompt(world: World, arguments: Mapping[str, Any]) -> dict[str, Any]:
    """The incident_summary prompt; raises KeyError naming a missing argument, UnknownIdError for an id."""
    device_id = arguments.get("device_id")
    if not isinstance(device_id, str):
        raise KeyError("device_id")
    status = world.get_device_status(device_id)
    incidents = world.incidents(device_id)
    wanted = arguments.get("incident_id")
    if isinstance(wanted, str) and wanted:
        incidents = [i for i in incidents if i.incident_id == wanted]
        if not incidents:
            raise UnknownIdError(f"Unknown incident_id {wanted!r} for device {device_id!r}.")
    listed = "; ".join(f"{i.incident_id} ({i.severity}): {i.summary}" for i in incidents) or "none open"
    text = (
        f"Summarize for the on-call engineer the incident(s) on {status['hostname']} ({device_id}, site "
        f"{status['site_id']}): status {status['status']}, {status['interfaces_up']} of "
        f"{status['interfaces_total']} interfaces up, maintenance "
        f"{'on' if status['maintenance']['enabled'] else 'off'}. Incidents: {listed}. State as of revision "
        f"{status['as_of']}."
    )
    return {
        "description": f"Incident summary for {device_id}",
        "messages": [{"role": "user", "content": {"type": "text", "text": text}}],
    }


def changes(world: World, before: Mapping[str, Any], subscribed: set[str], listed: bool) -> list[dict[str, Any]]:
    """The notifications a write calls for: ``before`` is ``snapshot(world, subscribed)`` taken before it;
    ``listed``: the client has listed the resources (only then is a changed list news to it)."""
    notes: list[dict[str, Any]] = []
    if listed and before.get("incidents") != len(world.incidents()):
        notes.append({"jsonrpc": "2.0", "method": "notifications/resources/list_changed"})
    for uri in sorted(subscribed):
        if before.get(uri) != _state_of(world, uri):
            notes.append({"jsonrpc": "2.0", "method": "notifications/resources/updated", "params": {"uri": uri}})
    return notes


def snapshot(world: World, subscribed: set[str]) -> dict[str, Any]:
    """What ``changes`` compares: the incident count and each subscribed resource's state (as_of aside)."""
    return {"incidents": len(world.incidents()), **{uri: _state_of(world, uri) for uri in subscribed}}


def _state_of(world: World, uri: str) -> Any:
    try:
        content = json.loads(read(world, uri)["contents"][0]["text"])
    except ResourceNotFound:
        return None
    content.pop("as_of", None)
    return content
