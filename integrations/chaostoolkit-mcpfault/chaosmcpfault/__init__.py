"""Chaos Toolkit extension for mcpfault (the distribution ``chaostoolkit-mcpfault``).

chaosmcpfault
├── actions             add_fault, remove_fault, disable_faults, enable_faults, reset_faults,
│                       crash_server, stall_server, restart_server, call_tool, run_bench
├── probes              fault_counts, request_stats, error_rate, server_alive, task_outcome_rate
└── controls.safeguard  interrupts the experiment when a probe crosses its tolerance

Every activity talks to a live proxy through ``mcpfault.api.Control`` at the configuration key
``mcpfault_control_url``; a token comes from the secrets (key ``mcpfault_control_token``).
"""

from chaoslib.discovery.discover import discover_actions, discover_probes, initialize_discovery_result
from chaoslib.types import DiscoveredActivities, Discovery

__version__ = "0.1.0"
__all__ = ["__version__", "discover"]


def discover(discover_system: bool = True) -> Discovery:
    """What ``chaos discover chaostoolkit-mcpfault`` prints: every activity with its arguments.
    There is no system to discover: a proxy is found by its control URL."""
    discovery = initialize_discovery_result("chaostoolkit-mcpfault", __version__, "mcpfault")
    discovery["activities"].extend(load_exported_activities())
    return discovery


def load_exported_activities() -> list[DiscoveredActivities]:
    activities: list[DiscoveredActivities] = []
    activities.extend(discover_actions("chaosmcpfault.actions"))
    activities.extend(discover_probes("chaosmcpfault.probes"))
    return activities
