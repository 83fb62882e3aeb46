"""An agent's own CI test with mcpfault's pytest plugin: never silent when its writes fail.

    pytest examples/agents/test_never_silent.py

``mcpfault_bench`` runs the command as an external agent (the MCPFAULT_* contract) on N tasks through a
proxy with the profile, against the bundled mock server, and returns how each task was judged.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).parent
AGENT = [sys.executable, str(HERE / "scripted_agent.py"), "--when-a-call-fails", "give-up"]


def test_my_agent_is_never_silent_when_writes_fail(mcpfault_bench: Any) -> None:
    run = mcpfault_bench(agent_command=AGENT, profile=HERE / "failed_writes.toml", tasks=4)
    assert not run.silent, [(task.workflow, task.detail) for task in run.silent]
    assert run.counts()["failed_detected"] == 2  # both writes failed, and the agent said so
