"""Cassettes: record the official SDK client against real servers, replay, get the same answers."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from mcp import Client, MCPError, StdioServerParameters, stdio_client

from tests.test_interop import EVERYTHING, TIME_SERVER, needs_npm

ROOT = Path(__file__).resolve().parent.parent
MCPFAULT = [sys.executable, "-m", "mcpfault"]

pytestmark = [pytest.mark.anyio]


def params(command: list[str]) -> StdioServerParameters:
    return StdioServerParameters(command=command[0], args=command[1:], cwd=str(ROOT))


def record(out: Path, server: list[str], *extra: str) -> list[str]:
    return [*MCPFAULT, "record", "--out", str(out), *extra, "--", *server]


def replay(cassette: Path, *extra: str) -> list[str]:
    return [*MCPFAULT, "replay", str(cassette), *extra]


async def time_session(command: list[str], mode: str) -> dict[str, Any]:
    async with Client(stdio_client(params(command)), mode=mode, read_timeout_seconds=10) as client:
        tools = await client.list_tools()
        now = await client.call_tool("get_current_time", {"timezone": "Europe/Paris"})
        converted = await client.call_tool(
            "convert_time", {"source_timezone": "UTC", "time": "12:00", "target_timezone": "Asia/Tokyo"}
        )
    return {
        "tools": sorted(tool.name for tool in tools.tools),
        "now": now.model_dump(mode="json"),
        "converted": converted.model_dump(mode="json"),
    }


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_time_server_recorded_then_replayed_gives_the_same_answers(tmp_path: Path, mode: str) -> None:
    cassette = tmp_path / "time.cassette"
    live = await time_session(record(cassette, TIME_SERVER), mode)
    lines = [json.loads(line) for line in cassette.read_text().splitlines()]
    header = lines[0]
    assert header["cassette"] == 1 and header["eras"] == [{"legacy": "legacy", "auto": "modern"}[mode]]
    assert {line["direction"] for line in lines[1:]} == {"client", "server"}
    replayed = await time_session(replay(cassette), mode)
    assert replayed == live
    assert "Europe/Paris" in json.dumps(live["now"])


async def test_an_unmatched_request_gets_an_error_naming_the_closest_recorded_one(tmp_path: Path) -> None:
    cassette = tmp_path / "time.cassette"
    await time_session(record(cassette, TIME_SERVER), "legacy")
    async with Client(stdio_client(params(replay(cassette))), mode="legacy", read_timeout_seconds=10) as client:
        with pytest.raises(MCPError) as raised:
            await client.call_tool("get_current_time", {"timezone": "America/Lima"})
    message = str(raised.value)
    assert "no recorded request matches tools/call" in message
    assert "params.arguments.timezone: recorded \"Europe/Paris\", got \"America/Lima\"" in message


@needs_npm
async def test_server_everything_replays_tools_resources_prompts_and_progress(tmp_path: Path) -> None:
    cassette = tmp_path / "everything.cassette"

    async def session(command: list[str]) -> dict[str, Any]:
        progress: list[float] = []

        async def on_progress(done: float, total: float | None, message: str | None) -> None:
            progress.append(done)

        async with Client(stdio_client(params(command)), mode="legacy", read_timeout_seconds=15) as client:
            tools = await client.list_tools()
            echo = await client.call_tool("echo", {"message": "hello cassette"})
            long_op = await client.call_tool(
                "trigger-long-running-operation", {"duration": 1, "steps": 4}, progress_callback=on_progress
            )
            resources = await client.list_resources()
            first = resources.resources[0]
            read = await client.read_resource(first.uri)
            prompts = await client.list_prompts()
            prompt = await client.get_prompt("simple-prompt", {})
        return {
            "tools": [tool.name for tool in tools.tools],
            "echo": echo.model_dump(mode="json"),
            "long_op": long_op.model_dump(mode="json"),
            "progress": progress,
            "read": read.model_dump(mode="json"),
            "prompts": [p.name for p in prompts.prompts],
            "prompt": prompt.model_dump(mode="json"),
        }

    live = await session(record(cassette, EVERYTHING))
    assert live["progress"] == [1, 2, 3, 4]
    replayed = await session(replay(cassette))
    assert replayed == live
