"""The supervised server's account of one session: crashes, restarts and downtime by cause.

Read from the lifecycle lines the proxy wrote to its events file (``proxy/events.py``
``SERVER_EVENTS``): what the supervisor saw, not a guess from the client's side. A cause is the
fault type that ended the server (``crash``, ``oom_kill``), ``control`` (the control API), or
``none`` (it died by itself). Pure functions over data.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mcpfault.telemetry import names

OWN_EXIT = names.OWN_EXIT  # the cause of a death no fault caused

__all__ = ["OWN_EXIT", "ServerAccount", "account_of", "read_accounts", "write_accounts"]


@dataclass(frozen=True, slots=True)
class ServerAccount:
    """One session's server: what each cause did to it."""

    profile: str
    agent: str
    session: int
    trial: int = 0
    crashes: dict[str, int] = field(default_factory=dict)  # by cause
    restarts: dict[str, int] = field(default_factory=dict)  # by the cause of the death before it
    # Each down window, crash to the first answer after the restart, by the cause of its death.
    downtimes_s: dict[str, list[float]] = field(default_factory=dict)
    lost: dict[str, int] = field(default_factory=dict)  # windows that ended with the proxy, no server back

    @property
    def empty(self) -> bool:
        return not (self.crashes or self.restarts or self.downtimes_s or self.lost)

    def as_dict(self) -> dict[str, Any]:
        return {
            "profile": self.profile,
            "agent": self.agent,
            "session": self.session,
            "trial": self.trial,
            "crashes": self.crashes,
            "restarts": self.restarts,
            "downtimes_s": self.downtimes_s,
            "lost": self.lost,
        }

    @staticmethod
    def from_dict(data: Mapping[str, Any]) -> ServerAccount:
        return ServerAccount(
            profile=str(data["profile"]),
            agent=str(data["agent"]),
            session=int(data["session"]),
            trial=int(data.get("trial", 0)),
            crashes={str(k): int(v) for k, v in data.get("crashes", {}).items()},
            restarts={str(k): int(v) for k, v in data.get("restarts", {}).items()},
            downtimes_s={str(k): [float(x) for x in v] for k, v in data.get("downtimes_s", {}).items()},
            lost={str(k): int(v) for k, v in data.get("lost", {}).items()},
        )


def account_of(
    rows: Iterable[Mapping[str, Any]], *, profile: str, agent: str, session: int, trial: int = 0
) -> ServerAccount:
    """The account of a session from its events file's server lines (``read_server_events``)."""
    crashes: dict[str, int] = {}
    restarts: dict[str, int] = {}
    downtimes: dict[str, list[float]] = {}
    lost: dict[str, int] = {}
    for row in rows:
        cause = str(row.get("cause", names.OWN_EXIT))
        event = row.get("event")
        if event == names.SERVER_EXITED and row.get("crashed"):
            crashes[cause] = crashes.get(cause, 0) + 1
        elif event == names.SERVER_RESTARTED:
            restarts[cause] = restarts.get(cause, 0) + 1
        elif event == names.SERVER_BACK and row.get("back", True):
            downtimes.setdefault(cause, []).append(float(row["downtime_s"]))
        elif event == names.SERVER_BACK:
            lost[cause] = lost.get(cause, 0) + 1
    return ServerAccount(profile, agent, session, trial, crashes, restarts, downtimes, lost)


def write_accounts(path: Path, accounts: Iterable[ServerAccount]) -> None:
    with path.open("w", encoding="utf-8") as out:
        for account in accounts:
            out.write(json.dumps(account.as_dict(), separators=(",", ":"), sort_keys=True) + "\n")


def read_accounts(path: Path) -> list[ServerAccount]:
    """``server.jsonl`` of a bench run; a clear error naming the line that is not an account."""
    accounts = []
    with path.open(encoding="utf-8") as lines:
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                accounts.append(ServerAccount.from_dict(json.loads(line)))
            except (ValueError, TypeError, KeyError, AttributeError) as exc:
                raise ValueError(f"{path}:{number}: not a server account ({exc})") from None
    return accounts
