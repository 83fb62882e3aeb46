"""The rules engines decide with, as one immutable set that a controller swaps whole.

An engine reads ``LiveRules.current`` once per request and decides that request against the set it
read, so a change never lands halfway through a decision (one attribute assignment replaces the
set: atomic for readers on any thread). Every engine behind a proxy (one per HTTP session) shares
one ``LiveRules``; each keeps its own per-rule state (RNG, counters), found again by ``LiveRule.key``.

What may change at run time: rules added and removed, a rule's probability, limit and enabled flag,
and the kill switch (``enabled`` on the set). A rule added at run time seeds its RNG from the profile
seed and its name (``seed_key``); a profile rule keeps the seed of its index, as when nothing changes.
Pure data: no I/O, no clock.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from mcpfault.faults.profile import Profile, Rule

# Changes each set remembers, for engines that have not decided since (their next span shows them).
MAX_REMEMBERED_CHANGES = 64


@dataclass(frozen=True, slots=True)
class LiveRule:
    rule: Rule
    key: int  # stable across changes to the rule; new for every rule added
    seed_key: str  # the RNG is Random(f"{profile seed}:{seed_key}")
    enabled: bool = True
    runtime: bool = False  # added at run time (``reset`` removes it)


@dataclass(frozen=True, slots=True)
class RuleChange:
    """One change to the rule set, as events.jsonl and span events report it."""

    version: int
    action: str  # add, remove, patch, off, on, reset
    rule: str | None = None
    details: tuple[tuple[str, Any], ...] = ()

    def record(self) -> dict[str, Any]:
        out: dict[str, Any] = {"version": self.version, "action": self.action}
        if self.rule is not None:
            out["rule"] = self.rule
        out.update(self.details)
        return out


@dataclass(frozen=True, slots=True)
class RuleSet:
    rules: tuple[LiveRule, ...]
    seed: int
    enabled: bool = True  # the kill switch: False and no rule fires
    version: int = 0
    changes: tuple[RuleChange, ...] = ()  # the latest changes, oldest first, at most MAX_REMEMBERED_CHANGES

    @classmethod
    def from_profile(cls, profile: Profile) -> RuleSet:
        return cls(tuple(LiveRule(rule, rule.index, str(rule.index)) for rule in profile.rules), profile.seed)

    def find(self, name: str) -> LiveRule | None:
        return next((live for live in self.rules if live.rule.name == name), None)

    def changed(
        self,
        action: str,
        *,
        rules: tuple[LiveRule, ...] | None = None,
        enabled: bool | None = None,
        rule: str | None = None,
        details: dict[str, Any] | None = None,
    ) -> RuleSet:
        """The next set: these ``rules`` and ``enabled`` (unchanged when None), the change remembered."""
        version = self.version + 1
        change = RuleChange(version, action, rule, tuple(sorted((details or {}).items())))
        return RuleSet(
            self.rules if rules is None else rules,
            self.seed,
            self.enabled if enabled is None else enabled,
            version,
            (*self.changes, change)[-MAX_REMEMBERED_CHANGES:],
        )

    def changes_since(self, version: int) -> tuple[RuleChange, ...]:
        return tuple(c for c in self.changes if c.version > version)


@dataclass(slots=True)
class LiveRules:
    """The current set. Only a controller assigns ``current``; engines only read it."""

    current: RuleSet
    profile: Profile = field(repr=False)
    next_key: int = 0

    @classmethod
    def of(cls, profile: Profile) -> LiveRules:
        return cls(RuleSet.from_profile(profile), profile, len(profile.rules))

    def new_key(self) -> int:
        key, self.next_key = self.next_key, self.next_key + 1
        return key
