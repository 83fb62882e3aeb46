"""The bench's fork server: a forked proxy behaves as an exec'd one, reports its exit, leaves no orphan."""

from __future__ import annotations

import dataclasses
import os
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

from mcpfault.harness.bench import BenchConfig, plan_sessions, resolve_profile
from mcpfault.harness.client import StdioClient
from mcpfault.harness.forkserver import ForkServer, forkable
from mcpfault.harness.session import run_session
from mcpfault.mock.world import World

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parent.parent
PYTHON = sys.executable
MOCK = [PYTHON, "-m", "mcpfault.mock", "--seed", "0"]


def bounded(function: Any, *args: Any, seconds: float = 90) -> Any:
    async def main() -> Any:
        with anyio.fail_after(seconds):
            return await function(*args)

    return anyio.run(main)


def proxy(*args: str) -> list[str]:
    return [PYTHON, "-m", "mcpfault", "proxy", "--config", str(ROOT / "profiles" / "baseline.toml"), *args]


def parent_of(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def test_only_our_own_command_is_forkable():
    assert forkable(proxy("--", *MOCK))
    assert not forkable(["python3", "-m", "mcpfault", "proxy"])  # another interpreter: exec it
    assert not forkable([PYTHON, "-m", "mcpfault.mock"])
    assert not forkable([PYTHON, "-c", "pass"])


def test_a_forked_proxy_relays_and_exits_like_an_execd_one(tmp_path):
    async def main() -> tuple[Any, ...]:
        async with ForkServer.open() as server:
            assert server is not None  # Linux: fork, pidfds and SCM_RIGHTS are all there
            client = StdioClient(proxy("--no-summary", "--", *MOCK), launcher=server)
            async with client:
                assert client._process is not None
                pid = client._process.pid
                forked_by = parent_of(pid)
                hello = await client.connect()
                tools = await client.list_tools()
            return pid, forked_by, server._process.pid, hello, tools, client.exit_code

    pid, forked_by, server_pid, hello, tools, code = bounded(main)
    assert forked_by == server_pid != os.getpid()  # it was forked by the server, not started by us
    assert hello["serverInfo"]["name"] == "mcpfault-mock"
    assert {t["name"] for t in tools} >= {"list_sites", "open_incident"}
    assert code == 0
    assert not Path(f"/proc/{pid}").exists()  # reaped


def fork_a_proxy_without_a_server(log: Path) -> int:
    """A forked `mcpfault proxy --config missing.toml` (no server command), its stderr into ``log``: its exit code."""

    async def main() -> int:
        async with ForkServer.open() as server:
            assert server is not None
            with log.open("wb") as stderr:
                process = await server.spawn([PYTHON, "-m", "mcpfault", "proxy", "--config", "missing.toml"], stderr)
                code = await process.wait()
                await process.aclose()
                return code

    return bounded(main)


def test_a_forked_proxys_exit_code_and_stderr_are_the_commands(tmp_path):
    log = tmp_path / "proxy.log"
    assert fork_a_proxy_without_a_server(log) == 2  # a usage error, as `python -m mcpfault proxy` exits
    assert "no server command" in log.read_text()


def test_a_forked_proxy_imports_nothing_more_before_it_runs(tmp_path, monkeypatch):
    # Each import after the fork is paid once per session: the parser and what its subcommands
    # import (the control client, the client configs) are built in the fork server, once.
    monkeypatch.setenv("PYTHONPROFILEIMPORTTIME", "1")  # the fork server's, and so its children's
    log = tmp_path / "proxy.log"
    assert fork_a_proxy_without_a_server(log) == 2
    text = log.read_text()
    assert "no server command" in text
    assert [line for line in text.splitlines() if line.startswith("import time:")] == []


def test_closing_the_server_ends_a_proxy_still_running(tmp_path):
    async def main() -> int:
        async with ForkServer.open() as server:
            assert server is not None
            process = await server.spawn(proxy("--no-summary", "--", *MOCK))
            return process.pid  # left running: its stdin is still open

    pid = bounded(main)
    assert not Path(f"/proc/{pid}").exists()


def test_forked_and_execd_proxies_give_the_same_outcomes(tmp_path):
    """The same sessions (every default profile, all three agents), once with forked proxies, once exec'd."""
    world = World.generate(0)
    profiles = tuple(resolve_profile(name) for name in ("mixed", "error", "malformed", "stale", "drift_output"))
    config = BenchConfig(
        profiles=profiles, agents=("naive", "retry-only", "resilient"), out_dir=tmp_path, tasks=6, session_tasks=6
    )

    async def run(fork: bool) -> list[tuple[Any, ...]]:
        plans = plan_sessions(dataclasses.replace(config, out_dir=tmp_path / ("fork" if fork else "exec")), world)
        results = []
        limiter = anyio.CapacityLimiter(4)  # few at a time: a loaded machine must not miss deadlines
        async with ForkServer.open() as server, anyio.create_task_group() as tg:

            async def one(plan: Any) -> None:
                async with limiter:
                    results.append(await run_session(plan, world, launcher=server if fork else None))

            for plan in plans:
                tg.start_soon(one, plan)
        rows = []
        for result in results:
            assert result.error is None, result.error
            rows += [
                (r.profile, r.agent, r.task_index, r.outcome, r.fault_modes, r.attempts, r.retries, r.duplicates)
                for r in result.records
            ]
        return sorted(rows)

    forked = bounded(run, True, seconds=240)
    execd = bounded(run, False, seconds=240)
    assert len(forked) == len(profiles) * 3 * 6
    assert forked == execd


def test_the_entry_point_it_is_given_is_what_python_m_mcpfault_runs(capsys: pytest.CaptureFixture[str]) -> None:
    """The fork server runs the command line by name (app.argv.ENTRY_POINT), never importing the CLI."""
    import functools
    import importlib

    from mcpfault import __version__, cli
    from mcpfault.app.argv import ENTRY_POINT

    module, _, function = ENTRY_POINT.partition(":")
    run = getattr(importlib.import_module(module), function)()
    assert isinstance(run, functools.partial) and run.func is cli.main
    with pytest.raises(SystemExit):
        run(["--version"])
    assert capsys.readouterr().out.strip() == f"mcpfault {__version__}"
    source = (Path(cli.__file__).parents[1] / "harness" / "forkserver.py").read_text()
    assert "from mcpfault.cli" not in source and "from mcpfault import cli" not in source
