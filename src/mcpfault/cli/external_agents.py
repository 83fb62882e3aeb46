"""The external agents' options of ``run`` and ``bench``: ``--agent(s) cmd:NAME`` with ``--agent-command``."""

from __future__ import annotations

import argparse
from typing import Any

from mcpfault.errors import UsageError


def add_options(parser: argparse.ArgumentParser, *, bench: bool) -> None:
    group = parser.add_argument_group(
        "external agents",
        "your own agent as cmd:NAME: one process per task, given the MCPFAULT_* environment (README, 'Your agent')",
    )
    group.add_argument(
        "--agent-command",
        action="append",
        default=[],
        metavar="NAME=COMMAND" if bench else "COMMAND",
        help=(
            'the command line of cmd:NAME (--agent-command mine="python my_agent.py"); once per external agent'
            if bench
            else 'the command line of the cmd:NAME agent (--agent-command "python my_agent.py")'
        ),
    )
    group.add_argument(
        "--agent-timeout",
        type=float,
        default=120.0,
        metavar="SECONDS",
        help="how long an external agent's process may take per task; then its process group is ended and the "
        "task is failed_detected (agent_timeout) (120)",
    )


def configs(args: argparse.Namespace, agents: tuple[str, ...], workflows: tuple[str, ...]) -> tuple[Any, ...]:
    """The external agents' configs, checked before any work; refuses --agent-command without a cmd:NAME."""
    from mcpfault.harness.agents.external import check_workflows, external_configs, is_external, parse_agent_commands

    named = [a for a in agents if is_external(a)]
    if not named:
        if args.agent_command:
            raise UsageError("--agent-command applies to external agents only; name one as cmd:NAME")
        return ()
    single = named[0].removeprefix("cmd:") if len(named) == 1 and len(agents) == 1 else None
    commands = parse_agent_commands(args.agent_command, single=single)
    check_workflows(workflows)
    return tuple(external_configs(agents, commands, args.agent_timeout).values())
