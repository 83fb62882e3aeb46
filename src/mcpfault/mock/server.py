"""The mock MCP server: the `World` served as newline-delimited JSON-RPC on stdio, in both protocol eras.

This module is the process around a `Session` (`mcpfault.mock.session`, the era rules and the tools):
the read loop, the stop signals, the final state file and the span flush. Tracing is in
`mcpfault.mock.tracing`; OpenTelemetry is imported only when something asks for spans.

Requests are handled one at a time, in order, on the main thread; each response is one write.
"""

from __future__ import annotations

import os
import pathlib
import signal
import sys
from types import FrameType
from typing import BinaryIO, Final

from mcpfault.mock import jsontext
from mcpfault.mock.journal import Journal, JournalError
from mcpfault.mock.session import (
    CAPABILITIES,
    INSTRUCTIONS,
    SERVER_INFO,
    SERVER_NAME,
    SERVER_VERSION,
    RequestError,
    Session,
)
from mcpfault.mock.tracing import span_recorder
from mcpfault.mock.world import World

__all__ = [
    # the process
    "serve",
    "run",
    "write_state",
    # one connection, re-exported from `mcpfault.mock.session`
    "Session",
    "RequestError",
    "SERVER_NAME",
    "SERVER_VERSION",
    "SERVER_INFO",
    "INSTRUCTIONS",
    "CAPABILITIES",
]

_STOP_SIGNALS: Final = (signal.SIGTERM, signal.SIGINT)


# ---- the stdio loop and its exits -------------------------------------------------------------------


class _Stop(Exception):
    """Raised by the signal handler to leave a blocking read."""


class _Stopper:
    """The SIGTERM/SIGINT handler.

    While the loop is blocked reading stdin nothing is half-done, so the handler raises `_Stop` to leave
    the read at once. At any other moment (a request being handled or its answer written) it only takes
    note, and the loop stops after that answer: the world is never left in the middle of a change.
    """

    def __init__(self) -> None:
        self.reading = False
        self.signum: int | None = None

    def __call__(self, signum: int, frame: FrameType | None) -> None:
        self.signum = signum
        if self.reading:
            raise _Stop


def run(session: Session, stdin: BinaryIO, stdout: BinaryIO, stopper: _Stopper) -> int:
    """Answer requests from `stdin` until EOF, a stop signal, or a closed `stdout`; the lines read."""
    lines = 0
    try:
        while True:
            stopper.reading = True
            # A signal that came while the flag was down was only noted: look before blocking.
            if stopper.signum is not None:
                return lines
            line = stdin.readline()
            stopper.reading = False
            if not line:
                return lines
            lines += 1
            response = session.handle_line(line)
            if response is not None:
                try:
                    _write_all(stdout, response)
                except (BrokenPipeError, ConnectionResetError):
                    _discard_stdout()
                    return lines
    except _Stop:
        return lines
    finally:
        stopper.reading = False


def _write_all(stream: BinaryIO, data: bytes) -> None:
    """One response, whole. Under PYTHONUNBUFFERED sys.stdout.buffer is a raw FileIO, which may write less."""
    view = memoryview(data)
    while view:
        written = stream.write(view)
        view = view[written or 0 :]
    stream.flush()


def _discard_stdout() -> None:
    # The reader is gone; point fd 1 at /dev/null so the interpreter's final flush cannot fail.
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):
        pass


def write_state(world: World, state_path: pathlib.Path, *, unless_present: bool = False) -> None:
    """Write `world.final_state()` atomically: readers see the old file or the whole new one.

    ``unless_present``: write only where no file is (created exclusively, not replaced). A server that
    read nothing writes so: behind the HTTP bridge a server per era shares one state path, and the
    idle one's untouched world must not replace the state of the one that served, whichever exits first.
    """
    state_path.parent.mkdir(parents=True, exist_ok=True)
    data = (jsontext.indented(world.final_state()) + "\n").encode("utf-8")
    if unless_present:
        try:
            fd = os.open(state_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            return
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
        finally:
            os.close(fd)
        return
    # A name of our own next to the target (not tempfile: importing it costs more than this server's tools).
    tmp = state_path.with_name(f".{state_path.name}.{os.getpid()}.tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, state_path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def serve(
    seed: int = 0,
    state_path: pathlib.Path | None = None,
    *,
    spans_path: pathlib.Path | None = None,
    otlp_endpoint: str | None = None,
    journal_path: pathlib.Path | None = None,
) -> None:
    """Serve a `World.generate(seed)` on stdio until stdin closes or SIGTERM/SIGINT arrives.

    With `journal_path`, every state change is appended there before its answer, and a journal left
    by an earlier run (a restart) is replayed first, so the state survives the process
    (`mcpfault.mock.journal`); a journal that does not fit this world exits 2 before any request.

    On exit, for any of those reasons, writes the world's final state as JSON to `state_path` if given,
    then flushes its spans (OTLP JSON lines appended to `spans_path`, OTLP/HTTP to `otlp_endpoint`), and
    returns. Raises SystemExit(1) if the state cannot be written, SystemExit(2) if tracing cannot start.
    """
    try:
        recorder = span_recorder(spans_path, otlp_endpoint, SERVER_VERSION)
    except (ValueError, OSError) as exc:
        print(f"{SERVER_NAME}: cannot trace: {exc}", file=sys.stderr, flush=True)
        raise SystemExit(2) from exc
    stopper = _Stopper()
    previous = {sig: signal.signal(sig, stopper) for sig in _STOP_SIGNALS}
    world: World | None = None
    lines = 0
    try:
        fresh = World.generate(seed)
        session = Session(fresh, recorder, Journal(journal_path, seed) if journal_path is not None else None)
        try:
            session.replay()
        except JournalError as exc:
            print(f"{SERVER_NAME}: {exc}", file=sys.stderr, flush=True)
            raise SystemExit(2) from exc
        world = fresh  # only a world whose journal replayed whole may overwrite the state file
        lines = run(session, sys.stdin.buffer, sys.stdout.buffer, stopper)
    finally:
        # From here on a signal must not interrupt the final write (it is atomic, but then it would be
        # missing) nor the span flush (the last requests' spans are still queued).
        for sig in _STOP_SIGNALS:
            signal.signal(sig, signal.SIG_IGN)
        try:
            if stopper.signum is not None:
                print(f"{SERVER_NAME}: stopped by {signal.Signals(stopper.signum).name}", file=sys.stderr, flush=True)
            if state_path is not None and world is not None:
                try:
                    write_state(world, state_path, unless_present=lines == 0)
                except OSError as exc:
                    print(f"{SERVER_NAME}: cannot write state to {state_path}: {exc}", file=sys.stderr, flush=True)
                    raise SystemExit(1) from exc
        finally:
            try:
                if recorder is not None:
                    recorder.shutdown()
            finally:
                for sig, handler in previous.items():
                    signal.signal(sig, handler)
