"""The in-process controller of a live proxy: what the control API (and an experiment) may change.

It swaps the engines' rule set (``LiveRules``) whole, so every request is decided against one set,
and knows nothing of transports: it is given the proxy's counters, its request statistics, the
events sink and, where the proxy owns its server process, a ``ServerControl``. Every change becomes
a line in events.jsonl and, through the set's change log, an event on the next span of each engine.

Errors are exceptions of this module's small tree; the HTTP layer maps them to statuses:

ControlError
├── NotFound          no rule by that name (404)
├── Conflict          a rule by that name exists (409)
├── Invalid           the body has problems, each a ``Problem`` (400)
└── NoServerControl   this proxy does not own a server process it can act on (409)
"""

from __future__ import annotations

import asyncio
import dataclasses
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

from mcpfault.control.server import CannotRestart, ServerControl, signal_number
from mcpfault.errors import MCPFaultError, Problem, ProfileError
from mcpfault.faults import profile as profiles
from mcpfault.faults.live import LiveRule, LiveRules, RuleSet
from mcpfault.proxy.core import Stats
from mcpfault.proxy.events import EventSink

SOURCE = "POST /faults"
PATCHABLE = ("probability", "enabled", "limit")
MAX_STALL_S = 3600.0

Counters = Callable[[], list[tuple[str, int, int]]]


# How long POST /server/restart waits for the new generation before it answers with what it sees.
RESTART_WAIT_S = 15.0


class ControlError(MCPFaultError):
    """A control request that cannot be carried out; the message says why and what to do."""


class NotFound(ControlError):
    pass


class Conflict(ControlError):
    pass


class NoServerControl(ControlError):
    pass


class Invalid(ControlError):
    def __init__(self, problems: list[Problem]) -> None:
        self.problems = problems
        super().__init__("; ".join(str(p) for p in problems))


class Controller:
    def __init__(
        self,
        live: LiveRules,
        *,
        transport: str,
        counters: Counters,
        stats: Stats,
        events: EventSink | None = None,
        server: ServerControl | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.live = live
        self.transport = transport  # only to refuse a rule this proxy can never carry out
        self.server = server
        self._counters = counters
        self._stats = stats
        self._events = events
        self._clock = clock
        self._started = clock()
        self._lock = threading.Lock()  # read-modify-write of the set, from whichever thread calls
        self._background: set[asyncio.Task[None]] = set()

    # -- reading ----------------------------------------------------------------------------------

    @property
    def rules(self) -> RuleSet:
        return self.live.current

    def faults(self) -> list[dict[str, Any]]:
        counts = self._counts()
        current = self.live.current
        return [_describe(live, current.enabled, counts) for live in current.rules]

    def fault(self, name: str) -> dict[str, Any]:
        current = self.live.current
        return _describe(self._find(current, name), current.enabled, self._counts())

    def status(self) -> dict[str, Any]:
        requests = dict(self._stats.requests)  # a copy in one step: the proxy's threads keep counting
        faults: Counter[str] = Counter()
        for (_rule, type_name, _mode), count in dict(self._stats.faults).items():
            faults[type_name] += count
        current = self.live.current
        server = self.server
        return {
            "faults_enabled": current.enabled,
            "rules": len(current.rules),
            "version": current.version,
            "uptime_s": round(self._clock() - self._started, 3),
            "transport": self.transport,
            "requests": requests,
            "requests_total": sum(requests.values()),
            "faults": dict(faults),
            "faults_total": sum(faults.values()),
            "received": dict(self._stats.received),  # what clients got for faulted requests, by kind
            "server": None if server is None else {"pid": server.pid, "generation": server.generation},
        }

    # -- changing the rules -----------------------------------------------------------------------

    def add(self, raw: Any) -> dict[str, Any]:
        """Add one rule (a ``[[faults]]`` table as a mapping), validated as ``mcpfault validate`` does."""
        if not isinstance(raw, Mapping):
            raise Invalid([Problem(SOURCE, None, "body", "expected one [[faults]] table as a JSON object")])
        try:
            rule = profiles.rule_from_mapping(dict(raw), SOURCE)
        except ProfileError as exc:
            raise Invalid(exc.problems) from None
        if self.transport not in rule.fault.transports:
            carried = " and ".join(sorted(rule.fault.transports))
            message = f"{rule.type_name!r} acts on {carried} only; this proxy relays {self.transport}"
            raise Invalid([Problem(SOURCE, 0, "type", message, rule.name)])
        with self._lock:
            current = self.live.current
            if current.find(rule.name) is not None:
                raise Conflict(f"a rule named {rule.name!r} exists; remove it first or give another name")
            added = LiveRule(rule, self.live.new_key(), f"rule:{rule.name}", runtime=True)
            details = {"type": rule.type_name}
            self._swap(current.changed("add", rules=(*current.rules, added), rule=rule.name, details=details))
        return self.fault(rule.name)

    def remove(self, name: str) -> None:
        with self._lock:
            current = self.live.current
            gone = self._find(current, name)
            rules = tuple(live for live in current.rules if live is not gone)
            self._swap(current.changed("remove", rules=rules, rule=name))

    def patch(self, name: str, changes: Any) -> dict[str, Any]:
        """Change ``probability``, ``enabled`` or ``limit`` of a rule; its RNG and counters carry on."""
        source = f"PATCH /faults/{name}"
        with self._lock:
            current = self.live.current
            found = self._find(current, name)
            if not isinstance(changes, Mapping) or not changes:
                expected = f"expected a JSON object with any of: {', '.join(PATCHABLE)}"
                raise Invalid([Problem(source, None, "body", expected)])
            problems = [
                Problem(source, found.rule.index, key, f"cannot be changed live; only {', '.join(PATCHABLE)}", name)
                for key in changes
                if key not in PATCHABLE
            ]
            enabled = changes.get("enabled", found.enabled)
            if not isinstance(enabled, bool):
                message = f"got {enabled!r}; expected true or false"
                problems.append(Problem(source, found.rule.index, "enabled", message, name))
            try:
                rule = profiles.changed_rule(found.rule, changes, source)
            except ProfileError as exc:
                problems.extend(exc.problems)
            if problems:
                raise Invalid(problems)
            changed = dataclasses.replace(found, rule=rule, enabled=bool(enabled))
            rules = tuple(changed if live is found else live for live in current.rules)
            details = {key: changes[key] for key in PATCHABLE if key in changes}
            self._swap(current.changed("patch", rules=rules, rule=name, details=details))
        return self.fault(name)

    def off(self) -> None:
        """The kill switch: no rule fires, at once, for every request decided from now on."""
        with self._lock:
            self._swap(self.live.current.changed("off", enabled=False))

    def on(self) -> None:
        with self._lock:
            self._swap(self.live.current.changed("on", enabled=True))

    def reset(self) -> None:
        """Back to the profile as loaded: run-time rules removed, changes undone, faults on; counters kept."""
        with self._lock:
            loaded = RuleSet.from_profile(self.live.profile)
            self._swap(self.live.current.changed("reset", rules=loaded.rules, enabled=True))

    # -- the server process -----------------------------------------------------------------------

    async def crash(self, signal_name: str = "SIGKILL") -> dict[str, Any]:
        server = self._server("crash")
        signal_number(signal_name)  # a bad name is the caller's mistake, before anything happens
        pid = server.pid
        self._note("crash", {"signal": signal_name.upper(), "pid": pid})
        await server.crash(signal_name.upper())
        return {"crashed": pid, "signal": signal_name.upper(), "generation": server.generation}

    async def stall(self, duration_s: float) -> dict[str, Any]:
        """Freeze the server for ``duration_s``; returns at once, the stall runs on in the background."""
        server = self._server("stall")
        if not 0 < duration_s <= MAX_STALL_S:
            message = f"{duration_s} is not in (0, {MAX_STALL_S:g}] seconds"
            raise Invalid([Problem("POST /server/stall", None, "duration_s", message)])
        pid = server.pid
        self._note("stall", {"duration_s": duration_s, "pid": pid})
        task = asyncio.get_running_loop().create_task(server.stall(duration_s))
        self._background.add(task)
        task.add_done_callback(self._background.discard)
        await asyncio.sleep(0)  # let the stall begin before the answer goes out
        return {"stalled": pid, "duration_s": duration_s, "generation": server.generation}

    async def restart(self) -> dict[str, Any]:
        server = self._server("restart")
        before = server.generation
        try:
            await server.restart()
        except CannotRestart as exc:
            raise NoServerControl(str(exc)) from None
        # The answer says what the restart gave: wait (bounded) for the next generation to run.
        deadline = asyncio.get_running_loop().time() + RESTART_WAIT_S
        while (server.generation == before or server.pid is None) and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.02)
        self._note("restart", {"generation": server.generation, "pid": server.pid})
        return {"restarted": True, "generation": server.generation, "pid": server.pid, "previous_generation": before}

    async def aclose(self) -> None:
        """End background actions (a stall lets its server go on as it is cancelled)."""
        for task in list(self._background):
            task.cancel()
        for task in list(self._background):
            try:
                await task
            except (asyncio.CancelledError, Exception):
                pass

    # -- inside -----------------------------------------------------------------------------------

    def _server(self, action: str) -> ServerControl:
        if self.server is None:
            raise NoServerControl(
                f"cannot {action} the server: this proxy does not own a server process "
                "(it relays to --upstream URL); start the proxy with the server command after '--'"
            )
        return self.server

    def _note(self, action: str, details: dict[str, Any]) -> None:
        """A process action: not a rule change, but recorded the same way (events line, span event)."""
        with self._lock:
            self._swap(self.live.current.changed(action, details=details))

    def _swap(self, rules: RuleSet) -> None:
        self.live.current = rules  # one assignment: engines see the old set or the new, never a mix
        if self._events is not None:
            change = rules.changes[-1]
            # "control" names the change; such a line has no request_id, so readers of requests skip it.
            record = {"time": datetime.now(UTC).isoformat(timespec="milliseconds"), "control": change.action}
            record.update((k, v) for k, v in change.record().items() if k != "action")
            self._events.write(record)

    @staticmethod
    def _find(current: RuleSet, name: str) -> LiveRule:
        found = current.find(name)
        if found is None:
            names = ", ".join(live.rule.name for live in current.rules) or "none"
            raise NotFound(f"no rule named {name!r}; the rules are: {names}")
        return found

    def _counts(self) -> dict[str, tuple[int, int]]:
        return {name: (matched, injected) for name, matched, injected in self._counters()}


def _describe(live: LiveRule, faults_enabled: bool, counts: Mapping[str, tuple[int, int]]) -> dict[str, Any]:
    rule = live.rule
    matched, injected = counts.get(rule.name, (0, 0))
    settings = {f.name: getattr(rule.fault, f.name) for f in dataclasses.fields(rule.fault)}  # type: ignore[arg-type]
    return {
        "name": rule.name,
        "type": rule.type_name,
        "origin": "runtime" if live.runtime else "profile",
        "enabled": live.enabled,
        "active": live.enabled and faults_enabled,
        "probability": rule.probability,
        "tools": list(rule.tools),
        "after": rule.after,
        "limit": rule.limit,
        "start_after_s": rule.start_after_s,
        "duration_s": rule.duration_s,
        "sessions": rule.sessions,
        "settings": settings,
        "matched": matched,
        "injected": injected,
    }
