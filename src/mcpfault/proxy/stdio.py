"""The stdio transport: our stdin/stdout on one side, a child MCP server on the other.

It moves bytes and performs the ``Emit``s of ``ProxyCore``; it decides nothing about faults. One
thread per direction reads, runs the core (under one lock: the core is not thread-safe), and writes
with one ``write`` per destination per chunk read. Everything else with a lifetime (the two reader
threads, signal forwarding, delayed deliveries, the shutdown timer) is a task of one anyio task
group, and the reader threads stop when the group asks them to.

The server is a ``Supervisor``'s: with the profile's ``[server]`` table it is restarted after it
dies. In between, what the client sends is held (up to ``hold_s``) and written to the next
generation, after the client's handshake is replayed to it.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import anyio
import structlog
from anyio import CancelScope, to_thread
from anyio.abc import TaskGroup, TaskStatus

from mcpfault.protocol import jsonrpc
from mcpfault.protocol.jsonrpc import MessageKind
from mcpfault.proxy import pipes
from mcpfault.proxy.core import Emit, ProxyCore, To
from mcpfault.proxy.process.child import ChildProcess
from mcpfault.proxy.process.supervisor import Later, ServerObserver, Supervisor
from mcpfault.proxy.replies import server_down_reply

log = structlog.get_logger("mcpfault.proxy")

# After the server exited, its stdout is relayed to EOF while it keeps delivering: a grandchild holding
# the pipe open gets DRAIN_QUIET_S of silence, and all of the drain takes at most DRAIN_MAX_S. (A fixed
# 0.5 s once cut off answers still queued behind a long line to a slow client, under load.)
DRAIN_QUIET_S = 0.5
DRAIN_MAX_S = 10.0
# How long the client gets to take the last bytes before the proxy exits anyway.
FLUSH_TO_CLIENT_S = 5.0
# The proxy's status when the client stopped reading (a write to it failed) and the server exited 0:
# that of a process ended by SIGPIPE, the one convention of every mcpfault command (cli/__init__.py).
EXIT_CLIENT_GONE = 128 + signal.SIGPIPE
# How often time-triggered rules (a process fault at start_after_s) are looked at.
TIMER_TICK_S = 0.05
LISTING_TICK_S = 0.25  # how often a held tools/list is looked at (only rules that read tools need one)


@dataclass(frozen=True, slots=True)
class Lifecycle:
    # After the client leaves (stdin EOF) or a signal arrives: how long the server gets to exit
    # on its own, then how long after SIGTERM before SIGKILL.
    shutdown_timeout_s: float = 5.0
    kill_timeout_s: float = 2.0


def exit_status(returncode: int) -> int:
    """A shell's view of the status: 128+N for a child killed by signal N."""
    return 128 - returncode if returncode < 0 else returncode


class StdioProxy:
    def __init__(self, core: ProxyCore, server: Supervisor, lifecycle: Lifecycle = Lifecycle()) -> None:
        self.core = core
        self._supervisor = server
        self._lifecycle = lifecycle
        self._stop = pipes.StopSignal()
        self._core_lock = threading.Lock()
        self._state_lock = threading.Lock()
        self._server_lock = threading.Lock()  # the server's stdin, whether it is up, what waits for it
        self._tg: TaskGroup
        self._to_server: pipes.FdWriter
        self._to_client: pipes.FdWriter
        self._server_stdout = -1
        self._server_stdout_closed = anyio.Event()
        self._delayed: dict[int, tuple[Emit, CancelScope]] = {}
        self._client_gone = False
        self._ending = False
        self._shutdown = anyio.Event()  # the client left or a signal came: no more restarts
        self._server_up = True
        self._held: list[tuple[float, bytes]] = []  # (when, line) sent while the server was down
        self._core_failed_logged = False
        self._client_mid_line = False  # the server's last bytes were a partial line (it died mid-write, say)
        self._client_lines = pipes.LineSplitter()
        # The core's lanes for a line nothing can happen to (see ProxyCore.has_lanes).
        self._client_lane = core.lane_from_client if core.has_lanes else None
        self._server_lane = core.lane_from_server if core.has_lanes else None
        self._server_lines = pipes.LineSplitter()
        # Chunks of the server's stdout begun and done relaying: the drain after its exit waits while
        # they move, or while one is being written (to a client that reads slowly).
        self._server_chunks_begun = 0
        self._server_chunks_done = 0
        self._loop_thread = threading.get_ident()
        self._loop: asyncio.AbstractEventLoop
        self._calls: asyncio.Queue[tuple[Callable[..., object], tuple[object, ...]]]  # from other threads
        self._started = 0.0
        if server.settings.restart != "never":
            core.generation = server.generation
        core.holds_lost_answers = True  # its relay performs what from_server returns (see _relay)
        self._defer_events = core.writes_events  # no events file: nothing to hold until the write

    def _in_loop(self, function: Callable[..., object], *args: object) -> None:
        """Run ``function`` on the event loop's thread, from whichever thread we are on (in order,
        without waiting for it: the reader threads are not the loop's workers)."""
        if threading.get_ident() == self._loop_thread:
            function(*args)
        else:
            self._loop.call_soon_threadsafe(self._calls.put_nowait, (function, args))

    async def run(self, stdin_fd: int = 0, stdout_fd: int = 1, on_ready: Callable[[], None] | None = None) -> int:
        """Relay until the server exits (for good, when it is restarted); return its exit status.
        ``on_ready`` is called once SIGINT and SIGTERM are the proxy's to handle (to announce it then)."""
        self._loop_thread = threading.get_ident()
        self._loop = asyncio.get_running_loop()
        self._calls = asyncio.Queue()
        self._started = anyio.current_time()
        modes = pipes.set_nonblocking([stdout_fd])
        # Blocking reads are the fast ones (see pipes); a stdin that is also our stdout (a terminal, a
        # socket) shares its mode with the writes, which must not block, so it is read with polls.
        shared = pipes.same_file(stdin_fd, stdout_fd)
        modes |= pipes.set_blocking([stdin_fd], blocking=not shared)
        self._to_client = pipes.FdWriter(stdout_fd, self._stop, owned=False)
        self._attach(self._supervisor.child)
        try:
            async with anyio.create_task_group() as tg:
                self._tg = tg
                # Never blocks the caller (a reader thread may hold the core's lock, which the loop may want).
                loop = asyncio.get_running_loop()
                later: asyncio.Queue[Later] = asyncio.Queue()
                self._supervisor.bind(lambda make: loop.call_soon_threadsafe(later.put_nowait, make))
                tg.start_soon(self._run_later, later)
                tg.start_soon(self._run_calls)
                tg.start_soon(self._pump, stdin_fd, self._client_data, self._client_eof)
                tg.start_soon(self._pump_server, self._server_stdout, self._server_stdout_closed)
                await tg.start(self._forward_signals)
                if on_ready is not None:
                    on_ready()
                if self.core.engine.next_due_s() is not None:
                    tg.start_soon(self._timed_faults)
                tg.start_soon(self._listing_waits)  # a rule added live may need a listing too
                while True:
                    returncode = await self._supervisor.child.wait()
                    await self._drain_server_stdout()
                    status = exit_status(returncode)
                    if not self._supervisor.died(status, shutting_down=self._shutdown.is_set()):
                        break
                    if not await self._restart(status):
                        break
                if self._supervisor.down:
                    self._supervisor.gave_up()
                if self.core.stats.ended_by is None:
                    self.core.stats.ended_by = f"the server exited (status {status})"
                await self._finish(status)
                if self.core.stats.client_write_failed and status == 0:
                    status = EXIT_CLIENT_GONE  # the server is fine, but answers were lost: not a success
                self._stop.set()
                tg.cancel_scope.cancel()
        finally:
            self._stop.set()
            self._to_server.close()
            self._stop.close()  # the server's stdout is its reader's to close (pipes.read_loop)
            pipes.restore_blocking({fd: mode for fd, mode in modes.items() if fd in (stdin_fd, stdout_fd)})
        return status

    async def _drain_server_stdout(self) -> None:
        """Wait, once the server exited, for the rest of its stdout: until EOF, while it still moves."""
        closed = self._server_stdout_closed
        with anyio.move_on_after(DRAIN_MAX_S):
            while not closed.is_set():
                done = self._server_chunks_done
                with anyio.move_on_after(DRAIN_QUIET_S):
                    await closed.wait()
                relaying = self._server_chunks_begun != self._server_chunks_done
                if not relaying and self._server_chunks_done == done:
                    return  # quiet: a grandchild may hold the pipe open for good

    async def _run_later(self, later: asyncio.Queue[Later]) -> None:
        """What the supervisor schedules (a SIGCONT, a duty cycle, a memory watch) runs in the task group."""
        while True:
            self._tg.start_soon(await later.get())

    async def _run_calls(self) -> None:
        """What other threads ask the loop to do (``_in_loop``), in order, inside the task group."""
        while True:
            function, args = await self._calls.get()
            function(*args)

    def _attach(self, child: ChildProcess) -> None:
        """Take a generation's pipes: its stdin is where the client's lines go from now on."""
        server_stdin, server_stdout = child.take_pipes()
        pipes.set_nonblocking([server_stdin])
        pipes.set_blocking([server_stdout])
        self._to_server = pipes.FdWriter(server_stdin, self._stop, owned=True)
        self._server_stdout = server_stdout
        self._server_stdout_closed = anyio.Event()
        self._server_lines = pipes.LineSplitter()

    async def _restart(self, status: int) -> bool:
        """Between two generations: answer what the dead one never will, wait, start the next.

        False when the proxy is to end instead (a signal or the client left meanwhile, or the server
        cannot be started again)."""
        with self._server_lock:
            self._server_up = False
        generation = self._supervisor.generation + 1
        with self._core_lock:
            emits = self.core.server_restarting(status, generation)
        if self._client_mid_line and emits:
            emits.insert(0, Emit(To.CLIENT, b"\n"))
            self._client_mid_line = False
        await self._write(emits)
        self._to_server.close()  # its stdout is closed by its reader, which may still wait on a grandchild
        self._tg.start_soon(self._expire_held)
        with anyio.move_on_after(self._supervisor.settings.restart_delay_s):
            await self._shutdown.wait()
        if self._shutdown.is_set():
            return False
        try:
            child = self._supervisor.start()
        except Exception as exc:
            log.error("cannot restart the MCP server", error=str(exc))
            return False
        with self._core_lock:
            self.core.generation = self._supervisor.generation
            replay = self.core.replay_handshake(generation) if self._supervisor.settings.replay_handshake else []
        self._attach(child)
        self._tg.start_soon(self._pump_server, self._server_stdout, self._server_stdout_closed)
        if replay:
            self._to_server.write(b"".join(replay))  # the held lines follow once it is answered
        else:
            self._release_held()
        return True

    def _release_held(self) -> None:
        """The server is back: what waited for it goes out, in order, before anything newer."""
        with self._server_lock:
            held, self._held = self._held, []
            lines = without_cancelled([line for _, line in held])
            if lines and not self._client_gone:
                self._to_server.write(b"".join(lines))
            self._server_up = True

    async def _expire_held(self) -> None:
        """Requests held longer than ``hold_s`` are answered with an error; the server is not back."""
        hold_s = self._supervisor.settings.hold_s
        while True:
            with self._server_lock:
                if self._server_up:
                    return
                now = time.monotonic()
                expired = [line for when, line in self._held if now - when >= hold_s]
                self._held = [(when, line) for when, line in self._held if now - when < hold_s]
                waiting = min((when for when, _ in self._held), default=None)
            answers = [answer for line in expired if (answer := self._held_too_long(line, hold_s)) is not None]
            if answers:
                await self._write(answers)
            if self._shutdown.is_set() and waiting is None:
                return
            await anyio.sleep(hold_s if waiting is None else max(0.0, waiting + hold_s - time.monotonic()))

    def _held_too_long(self, line: bytes, hold_s: float) -> Emit | None:
        message = jsonrpc.parse(line)
        if message.kind is not MessageKind.REQUEST or message.body is None:
            return None  # a notification or an answer: nobody waits for it
        request_id = message.body.get("id")
        reply = server_down_reply(request_id, hold_s)
        with self._core_lock:
            known = self.core.end(
                request_id, "timeout", reply=reply, error_code=jsonrpc.UPSTREAM_UNAVAILABLE, upstream_contacted=False
            )
        return Emit(To.CLIENT, reply) if known else None

    async def _listing_waits(self) -> None:
        """Requests held for the proxy's own tools/list go on once it is overdue (a server that never
        answers it), instead of waiting for as long as the server is silent."""
        while True:
            with self._core_lock:
                wait_s = self.core.listing_wait_s()
            await anyio.sleep(LISTING_TICK_S if wait_s is None else min(wait_s, LISTING_TICK_S))
            if wait_s is not None and wait_s <= LISTING_TICK_S:
                self._relay([b""], lambda _nothing: self.core.listing_overdue(), To.SERVER)

    async def _timed_faults(self) -> None:
        """Time-triggered rules (a process fault at ``start_after_s``): performed when due."""
        engine = self.core.engine
        while (due_s := engine.next_due_s()) is not None:
            await anyio.sleep(max(0.0, due_s - (anyio.current_time() - self._started)))
            with self._core_lock:
                decisions = engine.due(anyio.current_time() - self._started)
                for decision in decisions:
                    for applied in decision.applied:
                        self.core.stats.faults[(applied.rule, applied.type_name, applied.mode)] += 1
            for decision in decisions:
                if decision.process is not None and not self._supervisor.down:
                    decision.process.perform(self._supervisor.ops)
            await anyio.sleep(TIMER_TICK_S)

    # -- the reader threads -----------------------------------------------------------------------

    async def _pump(
        self, fd: int, on_data: Callable[[bytes], None], on_eof: Callable[[], None], *, close: bool = False
    ) -> None:
        """Read ``fd`` on a thread of its own until EOF. A daemon, abandoned when the proxy stops: a
        blocking ``read`` cannot be interrupted, and once ``stop`` is set it delivers nothing more."""
        loop = asyncio.get_running_loop()
        done = anyio.Event()
        failure: list[BaseException] = []

        def read() -> None:
            try:
                pipes.read_loop(fd, self._stop, on_data, close=close)
            except BaseException as exc:  # raised again in the task, as to_thread would
                failure.append(exc)
            finally:
                with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits any more
                    loop.call_soon_threadsafe(done.set)

        threading.Thread(target=read, name=f"mcpfault-read-{fd}", daemon=True).start()
        await done.wait()
        if failure:
            raise failure[0]
        if not self._stop.is_set:
            on_eof()

    async def _pump_server(self, fd: int, closed: anyio.Event) -> None:
        """One generation's stdout, until its EOF; what it says after the next generation started is not relayed."""
        generation = self._supervisor.generation

        def on_data(data: bytes) -> None:
            if self._supervisor.generation == generation:
                self._server_chunks_begun += 1  # only this reader thread counts: no lock needed
                try:
                    self._server_data(data)
                finally:
                    self._server_chunks_done += 1

        def on_eof() -> None:
            if self._supervisor.generation == generation:
                self._server_eof(closed)
            else:
                closed.set()

        await self._pump(fd, on_data, on_eof, close=True)

    def _client_data(self, data: bytes) -> None:
        lane = self._client_lane if self._server_up else None
        if lane is not None and data.find(b"\n") == len(data) - 1 and self._client_lines.empty:
            upstream = self._through(lane, data)
            if upstream is not None:
                self._to_server_now([upstream])
                return
            lane = None  # the core's full path decides; the lane has seen this line already
        self._relay(self._client_lines.feed(data), self.core.from_client, To.SERVER, lane)

    def _server_data(self, data: bytes) -> None:
        # Not while the server is down or restarting: its first answer ends the downtime (below).
        lane = self._server_lane if self._server_up and not self._supervisor.down else None
        if lane is not None and data.find(b"\n") == len(data) - 1 and self._server_lines.empty:
            answer = self._through(lane, data)
            if answer is not None:
                if not self._to_client.write(answer):
                    self._client_stopped_reading()
                self.core.end_passed()
                return
            lane = None
        lines = self._server_lines.feed(data)
        if self._supervisor.down and any(jsonrpc.parse(line).kind is MessageKind.RESPONSE for line in lines):
            self._supervisor.answered()  # the restarted server answers: its downtime ends
        self._relay(lines, self.core.from_server, To.CLIENT, lane)
        self.core.end_passed()
        if not self._server_up and not self.core.replaying:
            self._release_held()  # the replayed handshake is answered: the client's requests may follow

    def _client_eof(self) -> None:
        rest = self._client_lines.rest()
        if rest:
            self._relay([rest], self.core.from_client, To.SERVER)
        self._client_left("the client closed stdin")

    def _server_eof(self, closed: anyio.Event) -> None:
        rest = self._server_lines.rest()
        if rest:
            self._relay([rest], self.core.from_server, To.CLIENT)
            self._client_mid_line = True
        self._in_loop(closed.set)

    def _relay(
        self,
        lines: list[bytes],
        handle: Callable[[bytes], list[Emit]],
        natural: To,
        lane: Callable[[bytes], bytes | None] | None = None,
    ) -> None:
        to_server: list[bytes] = []
        to_client: list[bytes] = []
        later: list[Emit] = []
        defer = self._defer_events
        with self._core_lock:
            if defer:
                self.core.defer_events()  # written below, once it is known whether the client got the answers
            for line in lines:
                try:
                    if lane is not None and (data := lane(line)) is not None:
                        # See ProxyCore.lane_from_client; not an alias of to_server, which a process fault renews.
                        (to_server if natural is To.SERVER else to_client).append(data)
                        continue
                    emits = handle(line)
                except Exception:
                    emits = [Emit(natural, self._core_failed(line))]
                for emit in emits:
                    if emit.process is not None:
                        # Before the request goes out (a stall stops the server first; a crash
                        # before it leaves the request unsent): what came before it goes first.
                        self._to_server_now(to_server)
                        to_server = []
                        if not self._supervisor.down:
                            emit.process.perform(self._supervisor.ops)
                    if emit.delay_s > 0:
                        later.append(emit)
                    elif emit.to is To.SERVER:
                        if emit.data:
                            to_server.append(emit.data)
                    else:
                        to_client.append(emit.data)
        # One write per destination per chunk: the syscall, not the parsing, is the cost that matters.
        undelivered = None
        if to_client and not self._to_client.write(b"".join(to_client) if len(to_client) > 1 else to_client[0]):
            undelivered = self._client_stopped_reading()
        if defer:
            with self._core_lock:
                self.core.write_deferred_events(undelivered)
        if to_server and natural is To.CLIENT:
            # From the server's own lines: the replayed handshake's end, which must not wait behind what is held.
            if not self._client_gone:
                self._to_server.write(b"".join(to_server))
        elif to_server:
            self._to_server_now(to_server)
        for emit in later:
            self._in_loop(self._schedule, emit)

    def _through(self, lane: Callable[[bytes], bytes | None], line: bytes) -> bytes | None:
        """One whole line through a lane (the common case, in as few steps as it takes); None: the
        core's full path decides."""
        with self._core_lock:
            try:
                return lane(line)
            except Exception:
                return self._core_failed(line)

    def _core_failed(self, line: bytes) -> bytes:
        """A bug of ours must not cost the user a message: the line is relayed as it is (logged once)."""
        if not self._core_failed_logged:
            self._core_failed_logged = True
            log.exception("internal error while handling a line; relaying it untouched", size=len(line))
        return line

    def _to_server_now(self, lines: list[bytes]) -> None:
        """Write to the server, or hold the lines while it is down (a restart is coming)."""
        if not lines or self._client_gone:
            return
        data = b"".join(lines) if len(lines) > 1 else lines[0]
        if self._server_up:  # read without the lock first: the common case must stay lean
            with self._server_lock:
                if self._server_up:
                    self._to_server.write(data)
                    return
        with self._server_lock:
            if self._server_up:
                self._to_server.write(data)
            else:
                now = time.monotonic()
                self._held.extend((now, line) for line in lines)  # a line each: expired and cancelled one by one

    # -- the event loop side ----------------------------------------------------------------------

    def _schedule(self, emit: Emit) -> None:
        # Registered now, not when the task first runs: a server that exits in between would otherwise
        # leave the answer neither held for _finish nor delivered.
        scope = anyio.CancelScope()
        self._delayed[id(emit)] = (emit, scope)
        self._tg.start_soon(self._deliver_later, emit, scope)

    async def _deliver_later(self, emit: Emit, scope: anyio.CancelScope) -> None:
        with scope:  # cancelled by _finish, which then delivers the answer itself
            try:
                await anyio.sleep(emit.delay_s)
            finally:
                self._delayed.pop(id(emit), None)
            undelivered = await self._write([emit])
            self._delivered([emit], undelivered)

    def _delivered(self, emits: list[Emit], undelivered: str | None = None) -> None:
        """Held-back answers are out (or, ``undelivered``, could not be written): their events say so now
        (what the client got, and when)."""
        with self._core_lock:
            for emit in emits:
                if emit.answers is None:
                    continue
                if undelivered is None:
                    self.core.answer_delivered(emit.answers)
                else:
                    self.core.answer_undelivered(emit.answers, undelivered)

    async def _write(self, emits: list[Emit]) -> str | None:
        """Write from the event loop without ever blocking it: a client that does not read stalls a thread.
        None, or why the client did not get its bytes."""
        to_client = b"".join(e.data for e in emits if e.to is To.CLIENT)
        to_server = b"".join(e.data for e in emits if e.to is To.SERVER)
        undelivered = None
        if to_client and not await to_thread.run_sync(self._to_client.write, to_client, abandon_on_cancel=True):
            undelivered = self._client_stopped_reading()
        if to_server and not self._client_gone:
            await to_thread.run_sync(self._to_server_now, [to_server], abandon_on_cancel=True)
        return undelivered

    def _client_stopped_reading(self) -> str:
        """A write to the client failed (EPIPE: it closed its stdin, our stdout): the proxy ends, and
        exits non-zero. Why, for the events of what it could not write."""
        why = f"the client stopped reading ({self._to_client.broken or 'its pipe is closed'})"
        self.core.stats.client_write_failed = True
        self._client_left(why)
        return why

    def _client_left(self, why: str) -> None:
        """Close the server's stdin, give it time to exit, then end it. Safe from any thread."""
        with self._state_lock:
            if self._client_gone or self._ending:
                return
            self._client_gone = True
            if self.core.stats.ended_by is None:
                self.core.stats.ended_by = why
        self._in_loop(self._shutdown.set)
        log.info("closing the MCP server's stdin", why=why)
        self._to_server.close()
        self._in_loop(self._tg.start_soon, self._end_server_after, self._lifecycle.shutdown_timeout_s)

    async def _forward_signals(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
            task_status.started()
            async for signum in signals:
                self._shutdown.set()  # whatever the server does now, it is not restarted
                if self.core.stats.ended_by is None:
                    self.core.stats.ended_by = f"signal {signal.Signals(signum).name}"
                log.info("forwarding signal to the MCP server", signal=signal.Signals(signum).name)
                self._supervisor.child.send_signal(signum)
                self._tg.start_soon(self._end_server_after, self._lifecycle.shutdown_timeout_s)

    async def _end_server_after(self, grace_s: float) -> None:
        await anyio.sleep(grace_s)
        server = self._supervisor.child
        if server.returncode is None:
            log.warning("the MCP server did not exit in time; sending SIGTERM", grace_s=grace_s)
            server.terminate()
            await anyio.sleep(self._lifecycle.kill_timeout_s)
            if server.returncode is None:
                log.warning("the MCP server ignored SIGTERM; sending SIGKILL")
                server.kill()

    async def _finish(self, status: int) -> None:
        """The server is gone: deliver what is held back, then answer what it never answered."""
        with self._state_lock:
            self._ending = True
        held = sorted(self._delayed.values(), key=lambda pair: pair[0].delay_s)
        for _, scope in held:
            scope.cancel()
        self._delayed.clear()
        with self._core_lock:
            self.core.defer_events()  # the answers to what the server left unanswered: written below
            ended_by = self.core.stats.ended_by or ""
            stopping = ended_by if ended_by.startswith("signal ") else None  # the proxy's signal, not the server's
            emits = [emit for emit, _ in held] + self.core.upstream_exited(status, stopping=stopping)
        if self._client_mid_line and any(emit.to is To.CLIENT for emit in emits):
            # End the server's partial line first: glued to it, our own answers would be lost too.
            emits.insert(0, Emit(To.CLIENT, b"\n"))
        # Bounded: a client that stops reading cannot keep the proxy alive.
        undelivered = None
        with anyio.move_on_after(FLUSH_TO_CLIENT_S) as flush:
            undelivered = await self._write(emits)
        if flush.cancelled_caught:
            undelivered = f"the client did not take its last answers within {FLUSH_TO_CLIENT_S:g} s"
        self._delivered([emit for emit, _ in held], undelivered)
        with self._core_lock:
            self.core.write_deferred_events(undelivered)


async def run_stdio(
    command: Sequence[str],
    core: ProxyCore,
    lifecycle: Lifecycle = Lifecycle(),
    *,
    stdin_fd: int = 0,
    stdout_fd: int = 1,
    supervisor: Supervisor | None = None,
    on_ready: Callable[[], None] | None = None,
) -> int:
    """Run the proxy on this process's stdin/stdout in front of ``command``; return the exit status.

    The server is supervised as the profile's ``[server]`` table says (pass ``supervisor`` to keep
    a handle on it: its generation, its pid, the control operations). ``on_ready``: called once
    the proxy relays and handles SIGINT and SIGTERM itself."""
    if supervisor is None:
        supervisor = Supervisor(command, core.engine.profile.server, observers=server_observers(core))
    supervisor.start()
    try:
        return await StdioProxy(core, supervisor, lifecycle).run(stdin_fd, stdout_fd, on_ready)
    finally:
        supervisor.child.kill()


def server_observers(core: ProxyCore) -> list[ServerObserver]:
    """The core's observers that also watch the server (the metrics)."""
    return [o for o in core.observers if isinstance(o, ServerObserver)]


def without_cancelled(lines: list[bytes]) -> list[bytes]:
    """Held lines, less the requests the client cancelled while they waited, and those cancellations:
    a server that never saw a request must not act on it after the client gave up (as a proxy that
    queues requests for a restarting upstream drops the ones whose client went away)."""
    if not any(b"notifications/cancelled" in line for line in lines):
        return lines
    parsed = [(line, *_request_or_cancel(line)) for line in lines]
    held = {key for _, key, _ in parsed if key is not None}
    gone = {cancels for _, _, cancels in parsed if cancels is not None and cancels in held}
    return [line for line, key, cancels in parsed if key not in gone and cancels not in gone]


def _request_or_cancel(line: bytes) -> tuple[tuple[bool, object] | None, tuple[bool, object] | None]:
    """(the id key of a request, the id key a cancellation names): None where the line is not one."""
    message = jsonrpc.parse(line)
    body = message.body
    if body is None:
        return None, None
    if message.kind is MessageKind.REQUEST:
        return jsonrpc.id_key(body.get("id")), None
    params = body.get("params")
    cancels = message.kind is MessageKind.NOTIFICATION and body.get("method") == "notifications/cancelled"
    if cancels and isinstance(params, dict) and jsonrpc.valid_id(params.get("requestId")):
        return None, jsonrpc.id_key(params["requestId"])
    return None, None
