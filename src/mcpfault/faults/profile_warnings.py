"""Warnings: a profile that is valid but will probably not do what its author meant, said before it runs.

A problem refuses the profile; a warning lets it run and says why its results may mislead. One list of
checks (``CHECKS``), one warning type: ``validate`` prints them after the file's ok line, the proxy at
start, ``run`` and ``bench`` before the first session, and the bench's report repeats them. A check is
a pure function of the profile and, when the caller knows them, its sessions' timing (``Timing``); add
one to ``CHECKS`` and every place prints it.

The timing checks find where a profile's results would measure the machine rather than the agents:

- A time window (``start_after_s`` / ``duration_s``) shorter than a session, or starting after it
  ends. A 20-task session of the bench lasts about a tenth of a second once its server is up, so a
  window that starts at 1 s never fires, and one of 60 ms meets as many tasks as the machine's load
  lets run in it (a 0.10-0.16 s window gave naive 40% at ``--jobs 4`` and 100% at ``--jobs 24``).
- A delay whose range (``delay_s`` to ``delay_s + jitter_s``) comes within scheduling noise of the
  client's per-call deadline: whether an answer is in time is then a coin the scheduler tosses
  (delays within about 15 ms of a 0.5 s deadline changed 26 of 120 records between two runs).

Any fault whose settings have ``delay_s`` (and ``jitter_s``) counts as a delay, whatever its type, so
a new delaying fault needs no line here.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from mcpfault.faults.profile import Profile, Rule

# What an unfaulted session of the bench costs: the proxy and the mock server starting and the
# handshake (the window's clock starts with the proxy), then each task. Measured with `mcpfault run
# --profile baseline --tasks 20` on the development machine (2 shared CPUs): 0.10 s from the proxy's
# start to the first tools/call, then 26 ms for the 20 tasks alone, about 90 ms at bench --jobs 24.
SERVER_START_S = 0.1
TASK_S = 0.005
# How far from the deadline a delay must stay for its outcome not to depend on the scheduler.
DEADLINE_NOISE_S = 0.015


@dataclass(frozen=True, slots=True)
class ProfileWarning:
    file: str
    rule: int | None  # index into [[faults]], None for the whole profile
    rule_name: str | None
    message: str

    def located(self) -> str:
        """Where and what, for a caller that prints its own ``warning:``."""
        where = "" if self.rule is None else f"faults[{self.rule}] ({self.rule_name!r}): "
        return f"{self.file}: {where}{self.message}"

    def __str__(self) -> str:
        where = "" if self.rule is None else f"faults[{self.rule}] ({self.rule_name!r}): "
        return f"{self.file}: warning: {where}{self.message}"


@dataclass(frozen=True, slots=True)
class Timing:
    """What the caller knows of the sessions the profile will run in (the proxy alone knows nothing)."""

    session_tasks: int
    call_deadline_s: float


Check = Callable[[Profile, Timing | None], Iterable[ProfileWarning]]


def expected_session_s(session_tasks: int) -> float:
    """An unfaulted session's length, from the proxy's start: what a time window has to cover."""
    return SERVER_START_S + session_tasks * TASK_S


def no_rules(profile: Profile, timing: Timing | None = None) -> Iterable[ProfileWarning]:
    if not profile.rules and not profile.no_faults_on_purpose:
        yield ProfileWarning(
            profile.source,
            None,
            None,
            "has no [[faults]] rules, so the proxy changes nothing; write each rule under [[faults]] "
            "(mcpfault faults lists the types), or say faults = [] for a relay on purpose (as baseline does)",
        )


def never_fires(profile: Profile, timing: Timing | None = None) -> Iterable[ProfileWarning]:
    for rule in profile.rules:
        if rule.probability == 0:
            why = "probability = 0: it matches calls but never injects; give a probability above 0"
        elif rule.limit == 0:
            why = "limit = 0: it may inject at most 0 times; remove limit or give one above 0"
        else:
            continue
        yield ProfileWarning(profile.source, rule.index, rule.name, why)


def window_outside_sessions(profile: Profile, timing: Timing | None) -> Iterable[ProfileWarning]:
    if timing is None:
        return
    session_s = expected_session_s(timing.session_tasks)
    for rule in profile.rules:
        message = _window_message(rule, session_s, timing.session_tasks)
        if message is not None:
            yield ProfileWarning(profile.source, rule.index, rule.name, message)


def delay_near_deadline(profile: Profile, timing: Timing | None) -> Iterable[ProfileWarning]:
    if timing is None:
        return
    for rule in profile.rules:
        message = _deadline_message(rule, timing.call_deadline_s)
        if message is not None:
            yield ProfileWarning(profile.source, rule.index, rule.name, message)


CHECKS: list[Check] = [no_rules, never_fires, window_outside_sessions, delay_near_deadline]


def warnings_of(
    profile: Profile, timing: Timing | None = None, checks: Iterable[Check] = CHECKS
) -> list[ProfileWarning]:
    """Every warning of every check, in the order of ``checks``; the timing checks only with ``timing``."""
    return [warning for check in checks for warning in check(profile, timing)]


def _window_message(rule: Rule, session_s: float, session_tasks: int) -> str | None:
    if rule.start_after_s is None and rule.duration_s is None:
        return None
    start = rule.start_after_s or 0.0
    session = f"a session of {session_tasks} tasks is expected to last about {session_s:.2f} s from the proxy's start"
    if start >= session_s:
        return (
            f"the window opens at start_after_s = {start:g} s, but {session}: it may never fire, or fire only "
            "when a slow machine stretches the session; open it earlier, or give the sessions more tasks"
        )
    if rule.duration_s is not None and rule.duration_s < session_s:
        return (
            f"the window lasts duration_s = {rule.duration_s:g} s, shorter than a session ({session}): how many "
            "tasks it meets depends on how fast the machine runs them (load, --jobs), not on the agents; "
            "make it cover the session, or count the calls with after and limit instead"
        )
    return None


def _deadline_message(rule: Rule, call_deadline_s: float) -> str | None:
    delay_s = getattr(rule.fault, "delay_s", None)
    if not isinstance(delay_s, int | float):
        return None
    jitter_s = getattr(rule.fault, "jitter_s", 0.0)
    highest = delay_s + (jitter_s if isinstance(jitter_s, int | float) else 0.0)
    if delay_s - DEADLINE_NOISE_S <= call_deadline_s <= highest + DEADLINE_NOISE_S:
        return (
            f"its delays ({delay_s:g} s to {highest:g} s) come within {1000 * DEADLINE_NOISE_S:g} ms of the "
            f"call deadline ({call_deadline_s:g} s): whether an answer is in time depends on the scheduler, and "
            "outcomes change between runs; keep the delays clear of the deadline on both sides"
        )
    return None
