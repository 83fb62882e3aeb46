"""Profiles, rules, experiments and the catalog, checked and described: what a tool that writes them
(the MCP server, your own editor) needs without reaching into ``mcpfault.faults`` or ``mcpfault.experiments``."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

if TYPE_CHECKING:
    from mcpfault.experiments.plan import Plan as ExperimentPlan


class FaultTypeInfo(NamedTuple):
    """One fault type a profile's ``[[faults]]`` rule can name."""

    name: str
    modes: tuple[str, ...]
    transports: tuple[str, ...]  # where it can act: stdio, http
    needs_process: bool  # acts on a server process the proxy started
    description: str  # the first line of its module's description


class ProfileInfo(NamedTuple):
    """A valid profile: its name and how many rules it has."""

    name: str
    rules: int


def fault_types() -> tuple[FaultTypeInfo, ...]:
    """Every registered fault type, in the catalog's order."""
    from mcpfault.faults.catalog import CATALOG

    return tuple(
        FaultTypeInfo(
            name=kind.type_name,
            modes=tuple(kind.MODES),
            transports=tuple(sorted(kind.transports)),
            needs_process=bool(kind.needs_process),
            description=(kind.__doc__ or "").strip().splitlines()[0] if kind.__doc__ else "",
        )
        for kind in CATALOG
    )


def bundled_profiles() -> dict[str, Path]:
    """The bundled profiles by name, sorted."""
    from mcpfault.faults.profile import bundled

    return bundled()


def scripted_agents() -> tuple[str, ...]:
    """The scripted agents a bench runs, in the report's order."""
    from mcpfault.analysis.summary import AGENT_ORDER

    return AGENT_ORDER


def check_profile(document: str | Mapping[str, Any], *, source: str = "<memory>") -> ProfileInfo:
    """A profile given as TOML text or as its tables, checked; ``ProfileError`` lists every problem."""
    from mcpfault.faults import profile

    loaded = (
        profile.loads(document, source=source)
        if isinstance(document, str)
        else profile.from_mapping(document, source=source)
    )
    return ProfileInfo(loaded.name, len(loaded.rules))


def check_rule(rule: Mapping[str, Any], *, source: str = "<memory>") -> None:
    """One ``[[faults]]`` table checked as a profile's rule is; ``ProfileError`` lists every problem."""
    from mcpfault.faults.profile import rule_from_mapping

    rule_from_mapping(rule, source=source)


def load_experiment(document: str | Path | Mapping[str, Any], *, source: str = "<memory>") -> ExperimentPlan:
    """An experiment: a path (or a bundled name), or its tables; ``ExperimentError`` lists every problem."""
    from mcpfault.experiments import plan

    if isinstance(document, Mapping):
        return plan.from_mapping(document, source)
    return plan.load(document)
