"""The server process across restarts: the proxy as its supervisor (the profile's ``[server]`` table).

Each generation is one ``ChildProcess`` (child.py stays the one place that starts, signals and ends
a process). The supervisor decides whether a death is followed by a restart (``restart``,
``max_restarts``), counts generations, crashes by cause and downtime, and carries out process
faults: it is the ``ServerProcessOps`` of faults/base.py. A transport owns the pipes and the
requests; it asks ``should_restart`` when the server dies and ``start`` for the next generation.

Its operations are safe from any thread: a signal is sent before the call returns, and what has to
happen later (a SIGCONT, a duty cycle, a memory watch, a delayed kill) is handed to ``schedule``,
which the transport binds to its task group.
"""

from __future__ import annotations

import signal
import threading
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import anyio
import structlog

from mcpfault.faults.profile import ServerSettings
from mcpfault.proxy import events
from mcpfault.proxy.process.child import ChildProcess
from mcpfault.proxy.replies import server_gone_reply
from mcpfault.telemetry.names import Received

log = structlog.get_logger("mcpfault.proxy")

RSS_SAMPLE_S = 0.1  # how often an oom_kill rule reads the server's resident memory
OWN_EXIT = events.OWN_EXIT  # the cause of a death no fault caused (the fault_type label of crashes_total)

StartHook = Callable[[int, int, int], None]  # (pid, pgid, generation), on every (re)start
Later = Callable[[], Coroutine[Any, Any, None]]
Schedule = Callable[[Later], object]


@dataclass(frozen=True, slots=True)
class ServerDeath:
    """One generation's end, as the supervisor saw it."""

    generation: int
    exit_status: int  # as a shell shows it (137 after SIGKILL)
    cause: str  # the fault type (or "control") that ended it, OWN_EXIT when nothing of ours did
    crashed: bool  # a non-zero exit, or one we caused
    restarting: bool  # a next generation follows (after restart_delay_s)


class ServerObserver:
    """What the supervisor reports (metrics, event records); every method does nothing unless overridden."""

    def server_died(self, death: ServerDeath) -> None: ...

    def server_crashed(self, cause: str, exit_status: int) -> None: ...

    def server_restarted(self, generation: int) -> None: ...

    def server_back(self, downtime_s: float) -> None: ...

    def server_given_up(self) -> None:
        """The next ``server_back`` ends a window with no server back: the proxy ends while it is down."""


class ServerEvents(ServerObserver):
    """The server's lifecycle as lines of the events file (``proxy/events.py``), beside the requests':
    each death, each restart, and the end of each down window with its length and the cause of the
    death that opened it. The bench's account of crashes and downtime reads these, not the metrics."""

    def __init__(self, sink: events.EventSink) -> None:
        self._sink = sink
        self._cause = OWN_EXIT  # of the death that opened the current down window
        self._given_up = False

    def _write(self, event: str, **facts: Any) -> None:
        self._sink.write({"time": datetime.now(UTC).isoformat(timespec="milliseconds"), "event": event, **facts})

    def server_died(self, death: ServerDeath) -> None:
        self._cause = death.cause
        self._write(
            events.SERVER_EXITED,
            generation=death.generation,
            exit_status=death.exit_status,
            cause=death.cause,
            crashed=death.crashed,
            restarting=death.restarting,
        )

    def server_restarted(self, generation: int) -> None:
        self._write(events.SERVER_RESTARTED, generation=generation, cause=self._cause)

    def server_given_up(self) -> None:
        self._given_up = True

    def server_back(self, downtime_s: float) -> None:
        back, self._given_up = not self._given_up, False
        self._write(events.SERVER_BACK, cause=self._cause, downtime_s=round(downtime_s, 6), back=back)


class Supervisor:
    def __init__(
        self,
        command: Sequence[str],
        settings: ServerSettings | None = None,
        *,
        observers: Sequence[ServerObserver] = (),
        clock: Callable[[], float] = time.monotonic,
        stdio: bool = True,
    ) -> None:
        self.command = list(command)
        self._stdio = stdio  # a stdio server (piped) or an HTTP one
        self.settings = settings if settings is not None else ServerSettings()
        self.start_hooks: list[StartHook] = []
        self._observers = tuple(observers)
        self._clock = clock
        self._child: ChildProcess | None = None
        self._generation = 0
        self.restarts = 0
        self.crashes: Counter[str] = Counter()  # by cause: a fault type, or OWN_EXIT
        self.own_exit_statuses: Counter[int] = Counter()  # the statuses of the crashes no fault caused
        self.downtimes_s: list[float] = []
        self._cause: str | None = None  # what the coming death is attributed to
        self._down_since: float | None = None
        self._stops = 0  # stall and starve windows in force (the server is continued when none is)
        self._lock = threading.Lock()
        self._schedule: Schedule | None = None
        self._restart_requested = False
        self.deaths: dict[int, ServerDeath] = {}  # by generation (at most max_restarts + 1)
        self._stopping = False  # the transport is ending: no more restarts
        self._stop_wake: anyio.Event | None = None  # cuts a restart delay short

    # -- what the control API and the probe use ---------------------------------------------------

    @property
    def pid(self) -> int | None:
        child = self._child
        return child.pid if child is not None and child.returncode is None else None

    @property
    def generation(self) -> int:
        return self._generation

    @property
    def child(self) -> ChildProcess:
        assert self._child is not None, "the supervisor has not started the server yet"
        return self._child

    @property
    def down(self) -> bool:
        """Between a death and the first answer of the next generation."""
        return self._down_since is not None

    async def crash(self, signal_name: str = "SIGKILL") -> None:
        self._signal(signal_name, "control")

    async def stall(self, duration_s: float) -> None:
        self.stall_for(duration_s)

    async def restart(self) -> None:
        """End the current generation; the transport starts the next (whatever ``restart`` says)."""
        self._restart_requested = True
        self._signal("SIGTERM", "control")

    # -- the transport's side ---------------------------------------------------------------------

    def bind(self, schedule: Schedule) -> None:
        self._schedule = schedule

    def start(self) -> ChildProcess:
        """Start the next generation (the first is generation 0)."""
        if self._child is not None:
            self._generation += 1
            self.restarts += 1
            for observer in self._observers:
                observer.server_restarted(self._generation)
        self._child = ChildProcess.start(self.command, stdio=self._stdio)
        self._stops = 0
        for hook in self.start_hooks:
            try:
                hook(self._child.pid, self._child.pgid, self._generation)
            except Exception:  # an observer's bug must not cost the server its restart
                log.exception("a server start hook failed", generation=self._generation)
        return self._child

    def died(self, exit_status: int, *, shutting_down: bool) -> bool:
        """Record the current generation's death; True when the transport should start the next."""
        cause = self._cause or OWN_EXIT
        self._cause = None
        requested, self._restart_requested = self._restart_requested, False
        crashed = exit_status != 0 or cause != OWN_EXIT
        if crashed and not shutting_down:
            self.crashes[cause] += 1
            if cause == OWN_EXIT:
                self.own_exit_statuses[exit_status] += 1
            for observer in self._observers:
                observer.server_crashed(cause, exit_status)
        policy = self.settings.restart
        wanted = requested or policy == "always" or (policy == "on-crash" and crashed)
        restart = wanted and not shutting_down and self.restarts < self.settings.max_restarts
        if restart:
            self._down_since = self._clock()
            log.warning(
                "the MCP server exited; restarting it",
                exit_status=exit_status,
                cause=cause,
                generation=self._generation + 1,
                delay_s=self.settings.restart_delay_s,
            )
        elif wanted and not shutting_down:
            log.warning("the MCP server exited; not restarting it again", max_restarts=self.settings.max_restarts)
        death = ServerDeath(self._generation, exit_status, cause, crashed, restart)
        self.deaths[self._generation] = death
        if not shutting_down:
            for observer in self._observers:
                observer.server_died(death)
        return restart

    async def after_death(
        self,
        exit_status: int,
        *,
        start_next: Callable[[], Awaitable[None]],
        on_death: Callable[[ServerDeath], None] = lambda _death: None,
    ) -> bool:
        """The current generation died: record it, tell ``on_death`` (the transport answers what the dead
        server never did), and when the policy restarts it, wait ``restart_delay_s`` (cut short by
        ``stop_supervising``) and ``start_next`` (the transport's start of the next generation, which
        raises when it fails). True when a next generation runs; False when the server is gone for
        good, its downtime so far counted."""
        restart = self.died(exit_status, shutting_down=self._stopping)
        on_death(self.deaths[self._generation])
        if restart:
            self._stop_wake = wake = anyio.Event()
            with anyio.move_on_after(self.settings.restart_delay_s):
                await wake.wait()
            restart = not self._stopping
        if restart:
            try:
                await start_next()
            except Exception as exc:
                if not self._stopping:  # else: ended mid-start by the transport's own stop
                    log.error("cannot restart the MCP server", error=str(exc), generation=self._generation)
                restart = False
        if not restart and self.down:
            self.gave_up()
        return restart

    def stop_supervising(self) -> None:
        """The transport is ending: a death from now on is no crash to restart, and a restart delay ends now."""
        self._stopping = True
        if self._stop_wake is not None:
            self._stop_wake.set()

    def answered(self) -> None:
        """The restarted server answered: the downtime ends here."""
        with self._lock:
            since, self._down_since = self._down_since, None
        if since is not None:
            downtime_s = self._clock() - since
            self.downtimes_s.append(downtime_s)
            for observer in self._observers:
                observer.server_back(downtime_s)

    def gave_up(self) -> None:
        """The transport ends while the server is down: the downtime so far counts."""
        if self._down_since is not None:
            for observer in self._observers:
                observer.server_given_up()
        self.answered()

    # -- ServerProcessOps: what process faults act through ------------------------------------------

    def _signal(self, signal_name: str, cause: str) -> None:
        child = self._child
        if child is None or child.returncode is not None:
            return
        self._cause = cause
        log.info("process fault: signalling the MCP server", signal=signal_name, cause=cause, pid=child.pid)
        child.send_signal(signal.Signals[signal_name])

    def stall_for(self, duration_s: float) -> None:
        child = self._child
        if child is None:
            return
        self._pause(child)
        self._later(lambda: self._resume_after(child, duration_s))

    def _pause(self, child: ChildProcess) -> None:
        with self._lock:
            self._stops += 1
        child.send_signal(signal.SIGSTOP)

    async def _resume_after(self, child: ChildProcess, duration_s: float) -> None:
        try:
            await anyio.sleep(duration_s)
        finally:
            self._resume(child)

    def _resume(self, child: ChildProcess) -> None:
        with self._lock:
            self._stops = max(0, self._stops - 1)
            last = self._stops == 0
        if last and child is self._child:
            child.send_signal(signal.SIGCONT)

    def _later(self, make: Later) -> None:
        if self._schedule is None:
            raise RuntimeError("the supervisor is not bound to a transport (call bind first)")
        self._schedule(make)

    @property
    def ops(self) -> ProcessOps:
        """This supervisor as the ``ServerProcessOps`` a process fault acts through."""
        return ProcessOps(self)

    def kill_later(self, signal_name: str, *, delay_s: float = 0.0, cause: str = "crash") -> None:
        if delay_s <= 0:
            self._signal(signal_name, cause)
            return
        child = self._child

        async def later() -> None:
            await anyio.sleep(delay_s)
            if child is self._child:
                self._signal(signal_name, cause)

        self._later(later)

    def starve(self, share: float, period_s: float, duration_s: float) -> None:
        child = self._child
        if child is None or share >= 1.0:
            return
        self._pause(child)
        self._later(lambda: self._duty_cycle(child, share, period_s, duration_s))

    async def _duty_cycle(self, child: ChildProcess, share: float, period_s: float, duration_s: float) -> None:
        """Stopped for (1 - share) of each period, running for the rest; continued at the end, whatever happens."""
        run_s, stop_s = share * period_s, (1.0 - share) * period_s
        ends = anyio.current_time() + duration_s
        try:
            await anyio.sleep(min(stop_s, duration_s))
            while anyio.current_time() < ends and child is self._child and child.returncode is None:
                child.send_signal(signal.SIGCONT)
                await anyio.sleep(min(run_s, max(0.0, ends - anyio.current_time())))
                if anyio.current_time() >= ends:
                    break
                child.send_signal(signal.SIGSTOP)
                await anyio.sleep(min(stop_s, max(0.0, ends - anyio.current_time())))
        finally:
            self._resume(child)

    def kill_above_rss(self, rss_mb: float, *, cause: str) -> None:
        child = self._child
        if child is None:
            return
        limit = rss_mb * 1024 * 1024

        async def watch() -> None:
            while child is self._child and child.returncode is None:
                rss = child.rss_bytes()
                if rss is not None and rss > limit:
                    log.info("process fault: the MCP server's memory is over the limit", rss_bytes=rss, limit_mb=rss_mb)
                    self._signal("SIGKILL", cause)
                    return
                await anyio.sleep(RSS_SAMPLE_S)

        self._later(watch)


class ProcessOps:
    """The supervisor as faults/base.py's ``ServerProcessOps`` (the names a process fault calls)."""

    def __init__(self, supervisor: Supervisor) -> None:
        self._supervisor = supervisor

    def crash(self, signal_name: str, *, delay_s: float = 0.0, cause: str = "crash") -> None:
        self._supervisor.kill_later(signal_name, delay_s=delay_s, cause=cause)

    def stall(self, duration_s: float) -> None:
        self._supervisor.stall_for(duration_s)

    def starve(self, share: float, period_s: float, duration_s: float) -> None:
        self._supervisor.starve(share, period_s, duration_s)

    def kill_above_rss(self, rss_mb: float, *, cause: str) -> None:
        self._supervisor.kill_above_rss(rss_mb, cause=cause)


def crash_causes(supervisor: Any) -> str:
    """The crashes by cause, in words: a fault type's count, and a death no fault caused as what it
    was (``exited by itself with status 3: 1``, not the label ``none``)."""
    parts = []
    for cause, count in sorted(supervisor.crashes.items()):
        if cause != OWN_EXIT:
            parts.append(f"{cause} {count}")
            continue
        statuses = getattr(supervisor, "own_exit_statuses", None) or {}
        shown = ", ".join(describe_status(status) for status in sorted(statuses)) or "its own exit"
        parts.append(f"exited by itself ({shown}) {count}")
    return ", ".join(parts) or "0"


def describe_status(status: int) -> str:
    """An exit status as a shell reports it: ``status 3``, or ``status 137 (SIGKILL)``."""
    if status > 128:
        try:
            return f"status {status} ({signal.Signals(status - 128).name})"
        except ValueError:
            pass
    return f"status {status}"


def summary_lines(supervisor: Any) -> list[str]:
    """The supervisor's account for the proxy's summary: generations, crashes by cause, downtime."""
    if supervisor is None:
        return []
    crashes = crash_causes(supervisor)
    downtimes = supervisor.downtimes_s
    total = sum(downtimes)
    worst = max(downtimes) if downtimes else 0.0
    return [
        f"server: generation {supervisor.generation}, crashes {crashes}, restarts {supervisor.restarts}, "
        f"downtime {total:.3f}s total ({len(downtimes)} windows, longest {worst:.3f}s)"
    ]


# -- what a client is told about a server that died or is down ----------------------------------------


def unanswered_reply(request_id: Any, death: ServerDeath) -> tuple[bytes, Received]:
    """The error for a request the dead server never answered, and what the client received
    (``replies.server_gone_reply``: the coming generation when it restarts)."""
    restarted_as = death.generation + 1 if death.restarting else None
    return server_gone_reply(request_id, exit_status=death.exit_status, restarted_as=restarted_as, before="answering")
