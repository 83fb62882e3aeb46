"""Guardrails: a profile that is valid but whose outcome would depend on timing, said before it runs.

Two ways a profile's results turn into a measure of the machine rather than of the agents:

- A time window (``start_after_s`` / ``duration_s``) shorter than a session, or starting after it
  ends. A 20-task session of the bench lasts about a tenth of a second once its server is up, so a
  window that starts at 1 s never fires, and one of 60 ms meets as many tasks as the machine's load
  lets run in it (a 0.10-0.16 s window gave naive 40% at ``--jobs 4`` and 100% at ``--jobs 24``).
- A delay whose range (``delay_s`` to ``delay_s + jitter_s``) comes within scheduling noise of the
  client's per-call deadline: whether an answer is in time is then a coin the scheduler tosses
  (delays within about 15 ms of a 0.5 s deadline changed 26 of 120 records between two runs).

Pure: a function of the profile and of what the caller says about its sessions. It warns and never
refuses: a profile may mean to be fragile. Any fault whose settings have ``delay_s`` (and
``jitter_s``) counts as a delay, whatever its type, so a new delaying fault needs no line here.
"""

from __future__ import annotations

from mcpfault.faults.profile import Profile, Rule

# What an unfaulted session of the bench costs: the proxy and the mock server starting and the
# handshake (the window's clock starts with the proxy), then each task. Measured with `mcpfault run
# --profile baseline --tasks 20` on the development machine (2 shared CPUs): 0.10 s from the proxy's
# start to the first tools/call, then 26 ms for the 20 tasks alone, about 90 ms at bench --jobs 24.
SERVER_START_S = 0.1
TASK_S = 0.005
# How far from the deadline a delay must stay for its outcome not to depend on the scheduler.
DEADLINE_NOISE_S = 0.015


def expected_session_s(session_tasks: int) -> float:
    """An unfaulted session's length, from the proxy's start: what a time window has to cover."""
    return SERVER_START_S + session_tasks * TASK_S


def profile_warnings(profile: Profile, *, session_tasks: int, call_deadline_s: float) -> list[str]:
    """Every timing hazard of ``profile`` for sessions of ``session_tasks`` tasks and calls with a
    deadline of ``call_deadline_s``, one line each, naming the file and the rule."""
    session_s = expected_session_s(session_tasks)
    warnings: list[str] = []
    for rule in profile.rules:
        where = f"{profile.source}: rule {rule.index + 1} ({rule.name!r})"
        warnings += [f"{where}: {text}" for text in _window_warnings(rule, session_s, session_tasks)]
        warnings += [f"{where}: {text}" for text in _deadline_warnings(rule, call_deadline_s)]
    return warnings


def _window_warnings(rule: Rule, session_s: float, session_tasks: int) -> list[str]:
    if rule.start_after_s is None and rule.duration_s is None:
        return []
    start = rule.start_after_s or 0.0
    session = f"a session of {session_tasks} tasks is expected to last about {session_s:.2f} s from the proxy's start"
    if start >= session_s:
        return [
            f"the window opens at start_after_s = {start:g} s, but {session}: it may never fire, or fire only "
            "when a slow machine stretches the session; open it earlier, or give the sessions more tasks"
        ]
    if rule.duration_s is not None and rule.duration_s < session_s:
        return [
            f"the window lasts duration_s = {rule.duration_s:g} s, shorter than a session ({session}): how many "
            "tasks it meets depends on how fast the machine runs them (load, --jobs), not on the agents; "
            "make it cover the session, or count the calls with after and limit instead"
        ]
    return []


def _deadline_warnings(rule: Rule, call_deadline_s: float) -> list[str]:
    delay_s = getattr(rule.fault, "delay_s", None)
    if not isinstance(delay_s, int | float):
        return []
    jitter_s = getattr(rule.fault, "jitter_s", 0.0)
    highest = delay_s + (jitter_s if isinstance(jitter_s, int | float) else 0.0)
    if delay_s - DEADLINE_NOISE_S <= call_deadline_s <= highest + DEADLINE_NOISE_S:
        return [
            f"its delays ({delay_s:g} s to {highest:g} s) come within {1000 * DEADLINE_NOISE_S:g} ms of the "
            f"call deadline ({call_deadline_s:g} s): whether an answer is in time depends on the scheduler, and "
            "outcomes change between runs; keep the delays clear of the deadline on both sides"
        ]
    return []
