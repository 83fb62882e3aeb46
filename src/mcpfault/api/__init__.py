"""mcpfault's public Python API: what the Chaos Toolkit extension, the pytest plugin and the MCP
server stand on, and what your own code may import. Nothing here reaches into private modules, and
nothing else under ``mcpfault`` is promised to stay as it is.

Proxy                 a proxy with a profile in front of a command (context manager; stdio or HTTP)
├── .command          stdio: the argv an agent launches as its MCP server
├── .url              http: the proxy's MCP endpoint
├── .control          a Control of its control API (None with control=False)
├── .events()         the request records (what ``--events`` writes)
├── .faults()         every InjectedFault, joined to its span
├── .spans()          the proxy's spans (SpanView)
├── .injected(type)   how many faults (of one type) were injected
└── .fault_for(tool)  the first fault injected into a call of that tool
Control               a client of a live proxy's control API (what ``mcpfault ctl`` uses)
run_experiment(path)  perform an experiment file; its ExperimentOutcome (verdict, state, exit code)
task_outcomes(dir)    tasks by outcome in a finished bench run directory
audit(command)        ``mcpfault audit``: retry-safety and truthful hints per tool (a dry run unless confirm=True)
agent_bench(argv)     your agent (the MCPFAULT_* contract) on N tasks under a profile: an AgentRun of TaskOutcomes
fault_types()         every fault type a rule can name (FaultTypeInfo: modes, transports, description)
bundled_profiles()    the bundled profiles by name; scripted_agents() the scripted agents
check_profile(doc)    a profile (TOML text or tables) checked: its ProfileInfo, or ProfileError
check_rule(table)     one [[faults]] rule checked as a profile's is
load_experiment(doc)  an experiment (a path, a bundled name or tables) checked: its ExperimentPlan
InjectedFault         one injected fault: type, mode, rule, method, tool, request id, span id
SpanView              one span as read back from a spans file

Errors (all MCPFaultError):
├── ProfileError      the profile is not valid; ``.problems`` names each (file, rule, field)
├── UsageError        a wrong argument (what, where, what to do)
├── ExperimentError   an experiment file is not valid; ``.problems`` names each
├── ProxyError        the proxy did not start; the message carries what it said
├── ApiError          the control API refused (``.status``, ``.message``, ``.problems``)
└── Unreachable       nothing answered at the control URL

Example::

    from mcp import Client, StdioServerParameters
    from mcpfault.api import Proxy

    with Proxy(["mcpfault", "mock-server"], profile="error", seed=7) as proxy:
        argv = proxy.command                 # give this to your agent as its MCP server
        ...                                  # run the agent
        assert proxy.injected("error") >= 1
"""

from mcpfault.api._agents import AgentRun, TaskOutcome, agent_bench
from mcpfault.api._audit import AuditOutcome, audit
from mcpfault.api._documents import (
    FaultTypeInfo,
    ProfileInfo,
    bundled_profiles,
    check_profile,
    check_rule,
    fault_types,
    load_experiment,
    scripted_agents,
)
from mcpfault.api._experiments import run_experiment
from mcpfault.api._runs import task_outcomes
from mcpfault.app.launch import InjectedFault, Proxy, ProxyError
from mcpfault.control.client import ApiError, Control, Unreachable
from mcpfault.errors import MCPFaultError, ProfileError, UsageError
from mcpfault.experiments.plan import ExperimentError
from mcpfault.experiments.plan import Plan as ExperimentPlan
from mcpfault.experiments.runner import Outcome as ExperimentOutcome
from mcpfault.telemetry.span_files import SpanView

__all__ = [
    # running a proxy
    "Proxy",
    "InjectedFault",
    "SpanView",
    # a live proxy's control API
    "Control",
    # experiments and finished runs
    "run_experiment",
    "ExperimentOutcome",
    "task_outcomes",
    # auditing a server's tools
    "audit",
    "AuditOutcome",
    # profiles, rules, experiments and the catalog
    "fault_types",
    "FaultTypeInfo",
    "bundled_profiles",
    "scripted_agents",
    "check_profile",
    "ProfileInfo",
    "check_rule",
    "load_experiment",
    "ExperimentPlan",
    # your agent, judged
    "agent_bench",
    "AgentRun",
    "TaskOutcome",
    # errors
    "MCPFaultError",
    "ProfileError",
    "ExperimentError",
    "UsageError",
    "ProxyError",
    "ApiError",
    "Unreachable",
]
