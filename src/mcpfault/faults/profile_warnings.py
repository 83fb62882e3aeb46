"""Warnings: a profile that is valid but will probably not do what its author meant.

A problem refuses the profile; a warning lets it run and says why it may do nothing. ``validate``
prints them after the file's ok line and the proxy at start. A check is a function from the
profile to the warnings it finds, listed in ``CHECKS``: add one there (pure, no I/O) and both
places print it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from mcpfault.faults.profile import Profile


@dataclass(frozen=True, slots=True)
class ProfileWarning:
    file: str
    rule: int | None  # index into [[faults]], None for the whole profile
    rule_name: str | None
    message: str

    def __str__(self) -> str:
        where = "" if self.rule is None else f"faults[{self.rule}] ({self.rule_name!r}): "
        return f"{self.file}: warning: {where}{self.message}"


Check = Callable[[Profile], Iterable[ProfileWarning]]


def no_rules(profile: Profile) -> Iterable[ProfileWarning]:
    if not profile.rules and not profile.no_faults_on_purpose:
        yield ProfileWarning(
            profile.source,
            None,
            None,
            "has no [[faults]] rules, so the proxy changes nothing; write each rule under [[faults]] "
            "(mcpfault faults lists the types), or say faults = [] for a relay on purpose (as baseline does)",
        )


def never_fires(profile: Profile) -> Iterable[ProfileWarning]:
    for rule in profile.rules:
        if rule.probability == 0:
            why = "probability = 0: it matches calls but never injects; give a probability above 0"
        elif rule.limit == 0:
            why = "limit = 0: it may inject at most 0 times; remove limit or give one above 0"
        else:
            continue
        yield ProfileWarning(profile.source, rule.index, rule.name, why)


CHECKS: list[Check] = [no_rules, never_fires]


def warnings_of(profile: Profile, checks: Iterable[Check] = CHECKS) -> list[ProfileWarning]:
    """Every warning of every check, in the order of ``checks``."""
    return [warning for check in checks for warning in check(profile)]
