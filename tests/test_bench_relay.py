"""The benchmark's yardsticks: ``benchmarks/relay.py`` as it is and with ``--parse`` (the floor for a
proxy that reads every message) relay what the echo server says, byte for byte, and stop with it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import call, request

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"
ECHO = [sys.executable, str(BENCHMARKS / "echo_server.py")]
RELAY = [sys.executable, str(BENCHMARKS / "relay.py")]


def conversation() -> bytes:
    lines = [request(0, "initialize", {"protocolVersion": "2025-11-25", "capabilities": {}})]
    lines += [call(i, "echo", text="x" * i) for i in range(1, 40)]
    lines.append(call("s", "echo", text="a string id"))
    return b"".join(lines)


@pytest.mark.parametrize("flags", [[], ["--parse"]])
def test_the_relays_answer_as_the_server_does(flags: list[str]) -> None:
    direct = subprocess.run(ECHO, input=conversation(), capture_output=True, timeout=30, check=True).stdout
    relayed = subprocess.run(
        [*RELAY, *flags, "--", *ECHO], input=conversation(), capture_output=True, timeout=30, check=True
    ).stdout
    assert relayed == direct and direct.count(b"\n") == 41


def test_a_bad_command_line_says_how_to_call_it() -> None:
    done = subprocess.run([*RELAY, "--fast", "--", *ECHO], capture_output=True, timeout=30, check=False)
    assert done.returncode == 2 and b"usage: relay.py [--parse] -- SERVER_COMMAND" in done.stderr
