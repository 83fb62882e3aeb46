"""One scripted session through the real proxy to the bundled mock server (`mcpfault run`).

The session behaves like a simple monitoring integration: discover the sites and devices, then
cycle through reads with an occasional write, one call at a time, each with a deadline. It records
every attempt; the proxy records every request; the mock server records its final state.
"""

from __future__ import annotations

import json
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio

from mcpfault.errors import CallError, UpstreamError
from mcpfault.harness.client import Era, StdioClient

DISCOVERY_TRIES = 5


@dataclass(frozen=True, slots=True)
class SessionConfig:
    profile: Path
    out_dir: Path
    calls: int = 200
    seed: int = 0
    era: Era = "legacy"
    deadline_s: float = 0.5


@dataclass(slots=True)
class SessionResult:
    config: SessionConfig
    outcomes: Counter[tuple[str, str]] = field(default_factory=Counter)  # (tool, outcome)
    wall_s: float = 0.0
    proxy_exit_code: int | None = None

    def by_tool(self) -> dict[str, Counter[str]]:
        table: dict[str, Counter[str]] = {}
        for (tool, outcome), count in self.outcomes.items():
            table.setdefault(tool, Counter())[outcome] += count
        return table


def proxy_command(config: SessionConfig) -> list[str]:
    python = sys.executable
    server = [python, "-m", "mcpfault", "mock-server", "--seed", str(config.seed)]
    server += ["--state", str(config.out_dir / "server-state.json")]
    proxy = [python, "-m", "mcpfault", "proxy", "--config", str(config.profile)]
    proxy += ["--events", str(config.out_dir / "events.jsonl")]
    return [*proxy, "--", *server]


async def run_session(config: SessionConfig, progress: Callable[[int], None] = lambda _n: None) -> SessionResult:
    config.out_dir.mkdir(parents=True, exist_ok=True)
    result = SessionResult(config)
    started = time.monotonic()
    with (config.out_dir / "proxy.log").open("wb") as proxy_log:
        client = StdioClient(proxy_command(config), deadline_s=config.deadline_s, era=config.era, stderr=proxy_log)
        async with client:
            await client.connect()
            sites = await _discover(client, "list_sites", {}, lambda r: [s["site_id"] for s in r["sites"]])
            devices: list[tuple[str, str]] = []
            for site in sites:
                found = await _discover(
                    client, "list_devices", {"site_id": site}, lambda r: [d["device_id"] for d in r["devices"]]
                )
                devices += [(site, device) for device in found]
            if not devices:
                raise UpstreamError("the mock server reported no devices; the session has nothing to do")
            for index in range(config.calls):
                site, device = devices[index % len(devices)]
                tool, arguments = _step(index, site, device)
                try:
                    await client.call_tool(tool, arguments)
                    result.outcomes[(tool, "ok")] += 1
                except CallError as exc:
                    result.outcomes[(tool, exc.failure)] += 1
                progress(1)
        result.proxy_exit_code = client.exit_code
        with (config.out_dir / "attempts.jsonl").open("w") as out:
            for attempt in client.attempts:
                out.write(json.dumps(attempt.as_record()) + "\n")
    result.wall_s = time.monotonic() - started
    return result


def _step(index: int, site: str, device: str) -> tuple[str, dict[str, Any]]:
    slot = index % 10
    if slot < 4:
        return "get_device_status", {"device_id": device}
    if slot < 6:
        return "get_interface_metrics", {"device_id": device}
    if slot == 6:
        return "get_site", {"site_id": site}
    if slot == 7:
        return "list_devices", {"site_id": site}
    if slot == 8:
        return "set_maintenance", {"device_id": device, "enabled": index % 20 == 8, "reason": "scheduled work"}
    return "open_incident", {
        "device_id": device,
        "summary": "interface errors above threshold",
        "severity": "medium",
        "idempotency_key": f"session-{index}",
    }


async def _discover(
    client: StdioClient, tool: str, arguments: dict[str, Any], pick: Callable[[Any], list[str]]
) -> list[str]:
    """Discovery must succeed for the session to mean anything: retry it a few times."""
    last: Exception | None = None
    for _ in range(DISCOVERY_TRIES):
        try:
            return pick(await client.call_tool(tool, arguments))
        except (CallError, KeyError, TypeError) as exc:
            last = exc
            await anyio.sleep(0.05)
    raise UpstreamError(f"{tool} failed {DISCOVERY_TRIES} times; last error: {last}")
