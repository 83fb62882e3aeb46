"""The mock MCP server: the `World` served over stdio with the official SDK.

Both protocol eras (2025-11-25 `initialize`, 2026-07-28 `server/discover`) come from `MCPServer`
itself. Every tool returns a pydantic model, so the SDK publishes an `outputSchema` and sends the
model as `structuredContent` (not wrapped in `{"result": ...}`) with the same JSON as text content.
"""

from __future__ import annotations

import json
import os
import pathlib
import signal
import sys
import tempfile
from collections.abc import Callable
from types import FrameType
from typing import Annotated, Literal, TypeVar

import anyio
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations
from pydantic import BaseModel, ConfigDict, Field

from mcpfault.mock.world import DeviceState, MockWorldError, OperStatus, Role, Severity, World

SERVER_NAME = "mcpfault-mock"
SERVER_VERSION = "0.1.0"
_STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)

READ = ToolAnnotations(read_only_hint=True, idempotent_hint=True, destructive_hint=False, open_world_hint=False)

INSTRUCTIONS = (
    "A simulated network-operations inventory. Start with list_sites, then list_devices(site_id), then "
    "get_device_status / get_interface_metrics(device_id). set_maintenance and open_incident change state; "
    "open_incident is not idempotent, so pass an idempotency_key if you may retry it. Every answer has as_of, "
    "the state revision it reflects."
)

AsOf = Annotated[int, Field(description="State revision this answer reflects; it grows by one on every change.")]
SiteId = Annotated[str, Field(description="Site id exactly as returned by list_sites.")]
DeviceId = Annotated[str, Field(description="Device id exactly as returned by list_devices.")]


class _Out(BaseModel):
    # additionalProperties: false in the outputSchema, so a drifted answer fails client validation.
    model_config = ConfigDict(extra="forbid")


class SiteSummary(_Out):
    site_id: str
    name: str
    region: str
    device_count: int


class SiteList(_Out):
    as_of: AsOf
    sites: list[SiteSummary]


class StatusCounts(_Out):
    ok: int
    degraded: int
    down: int


class SiteDetail(_Out):
    as_of: AsOf
    site_id: str
    name: str
    region: str
    device_count: int
    status_counts: StatusCounts = Field(description="Devices at the site by status.")
    devices_in_maintenance: list[str] = Field(description="Ids of devices currently in maintenance.")
    open_incident_ids: list[str]


class DeviceSummary(_Out):
    device_id: str
    hostname: str
    role: Role
    model: str
    status: DeviceState


class DeviceList(_Out):
    as_of: AsOf
    site_id: str
    devices: list[DeviceSummary]


class MaintenanceInfo(_Out):
    enabled: bool
    reason: str | None = Field(description="Why the device is in maintenance; null when it is not.")


class DeviceStatus(_Out):
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


class InterfaceMetrics(_Out):
    name: str
    speed_gbps: int
    oper_status: OperStatus
    utilization_pct: float = Field(description="Percent of line rate in use, 0-100.")
    errors_per_min: int
    latency_ms: float | None = Field(description="Round-trip latency to the peer; null while the interface is down.")


class DeviceInterfaces(_Out):
    as_of: AsOf
    device_id: str
    interfaces: list[InterfaceMetrics]


class MaintenanceChange(_Out):
    as_of: AsOf
    device_id: str
    enabled: bool
    reason: str | None
    changed: bool = Field(description="False when the device was already in the requested state.")


class IncidentOpened(_Out):
    as_of: AsOf
    incident_id: str
    device_id: str
    site_id: str
    summary: str
    severity: Severity
    status: Literal["open"]
    idempotency_key: str | None
    opened_revision: int
    created: bool = Field(description="False when idempotency_key matched an incident opened earlier.")


_T = TypeVar("_T")


def _answer(call: Callable[[], _T]) -> _T:
    # ToolError keeps the message on the wire (isError: true); any other exception would be hidden.
    try:
        return call()
    except MockWorldError as exc:
        raise ToolError(str(exc)) from exc


def build_server(world: World) -> MCPServer:
    """An MCPServer whose tools read and write `world`.

    Tools are async on purpose: a sync tool runs on a worker thread, and the world is only safe to touch
    from the event loop, where each call runs to completion without interleaving.
    """
    server: MCPServer = MCPServer(
        name=SERVER_NAME, version=SERVER_VERSION, instructions=INSTRUCTIONS, log_level="WARNING"
    )

    @server.tool(title="List sites", annotations=READ)
    async def list_sites() -> SiteList:
        """List every site (data center) with its region and device count."""
        return SiteList.model_validate(world.list_sites())

    @server.tool(title="Get site", annotations=READ)
    async def get_site(site_id: SiteId) -> SiteDetail:
        """Summarise one site: device counts by status, devices in maintenance, open incidents."""
        return SiteDetail.model_validate(_answer(lambda: world.get_site(site_id)))

    @server.tool(title="List devices", annotations=READ)
    async def list_devices(site_id: SiteId) -> DeviceList:
        """List the devices at a site with role, model and status (ok, degraded or down)."""
        return DeviceList.model_validate(_answer(lambda: world.list_devices(site_id)))

    @server.tool(title="Get device status", annotations=READ)
    async def get_device_status(device_id: DeviceId) -> DeviceStatus:
        """Status of one device: health, interfaces up, maintenance flag and open incidents."""
        return DeviceStatus.model_validate(_answer(lambda: world.get_device_status(device_id)))

    @server.tool(title="Get interface metrics", annotations=READ)
    async def get_interface_metrics(device_id: DeviceId) -> DeviceInterfaces:
        """Per-interface metrics of one device: oper status, utilization, errors per minute, latency."""
        return DeviceInterfaces.model_validate(_answer(lambda: world.get_interface_metrics(device_id)))

    @server.tool(
        title="Set maintenance",
        annotations=ToolAnnotations(
            read_only_hint=False, idempotent_hint=True, destructive_hint=False, open_world_hint=False
        ),
    )
    async def set_maintenance(
        device_id: DeviceId,
        enabled: Annotated[bool, Field(description="True to put the device in maintenance, false to end it.")],
        reason: Annotated[str, Field(description="Why; required when enabling.")],
    ) -> MaintenanceChange:
        """Put a device into maintenance or take it out. Idempotent: repeating the same call changes nothing."""
        return MaintenanceChange.model_validate(_answer(lambda: world.set_maintenance(device_id, enabled, reason)))

    @server.tool(
        title="Open incident",
        annotations=ToolAnnotations(
            read_only_hint=False, idempotent_hint=False, destructive_hint=False, open_world_hint=False
        ),
    )
    async def open_incident(
        device_id: DeviceId,
        summary: Annotated[str, Field(description="One line describing the problem.")],
        severity: Annotated[Severity, Field(description="How bad it is.")],
        idempotency_key: Annotated[
            str | None,
            Field(description="Optional client-chosen key; a repeated key returns the first incident instead."),
        ] = None,
    ) -> IncidentOpened:
        """Open a new incident on a device. NOT idempotent: each call opens another incident unless the
        idempotency_key was used before, in which case the earlier incident is returned with created=false."""
        return IncidentOpened.model_validate(
            _answer(lambda: world.open_incident(device_id, summary, severity, idempotency_key))
        )

    return server


def write_state(world: World, state_path: pathlib.Path) -> None:
    """Write `world.final_state()` atomically: readers see the old file or the whole new one."""
    state_path.parent.mkdir(parents=True, exist_ok=True)
    data = json.dumps(world.final_state(), indent=2) + "\n"
    fd, tmp = tempfile.mkstemp(prefix=f".{state_path.name}.", suffix=".tmp", dir=state_path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, state_path)
    except BaseException:
        pathlib.Path(tmp).unlink(missing_ok=True)
        raise


async def _run(server: MCPServer, world: World, state_path: pathlib.Path | None) -> None:
    async with anyio.create_task_group() as tg:
        tg.start_soon(_exit_on_signal, world, state_path)
        await server.run_stdio_async()
        tg.cancel_scope.cancel()


async def _exit_on_signal(world: World, state_path: pathlib.Path | None) -> None:
    # Signals are received by the event loop, between tool calls, so the state written is never half a write.
    with anyio.open_signal_receiver(*_STOP_SIGNALS) as signals:
        async for signum in signals:
            code = 0
            if state_path is not None:
                try:
                    write_state(world, state_path)
                except OSError as exc:
                    print(f"mcpfault-mock: cannot write state to {state_path}: {exc}", file=sys.stderr)
                    code = 1
            print(f"mcpfault-mock: stopped by {signal.Signals(signum).name}", file=sys.stderr)
            sys.stderr.flush()
            # The SDK reads stdin on a worker thread that cancellation cannot interrupt, so an orderly unwind
            # would hang until stdin closes. Nothing is left to save: leave now.
            os._exit(code)


class _Stop(Exception):
    """A signal that arrived before the event loop took over signal handling."""


def _raise_stop(signum: int, frame: FrameType | None) -> None:
    raise _Stop(signal.Signals(signum).name)


def serve(seed: int = 0, state_path: pathlib.Path | None = None) -> None:
    """Serve a `World.generate(seed)` on stdio until stdin closes or SIGTERM/SIGINT arrives.

    On exit, for any of those reasons, writes the world's final state as JSON to `state_path` if given.
    On a signal the process ends inside this call (exit status 0, or 1 if the state could not be written).
    """
    world = World.generate(seed)
    # Until the loop's own receiver is installed no tool can have run, so unwinding anywhere is safe.
    previous = {sig: signal.signal(sig, _raise_stop) for sig in _STOP_SIGNALS}
    try:
        anyio.run(_run, build_server(world), world, state_path)
    except _Stop:
        pass
    finally:
        # A late signal must not tear the final write.
        for sig in _STOP_SIGNALS:
            signal.signal(sig, signal.SIG_IGN)
        try:
            if state_path is not None:
                write_state(world, state_path)
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
