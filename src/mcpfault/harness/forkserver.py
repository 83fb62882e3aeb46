"""Start the bench's proxies by forking one interpreter that has already imported them.

Every session of the bench runs ``python -m mcpfault proxy ...``: a new interpreter that imports the
proxy, its fault engine, anyio, structlog and the span recorder before it relays a byte. That import
is most of what a proxy costs in a session of 20 tasks, and the matrix starts 135 of them. Here one
process (the fork server) imports all that once; each session's proxy is a ``fork()`` of it that
then runs exactly what ``python -m mcpfault proxy ...`` runs, with the same arguments, working
directory and environment, on its own stdin/stdout/stderr. It is still one fresh process per
session (nothing is shared at run time; ``random`` reseeds itself in a forked child), and it starts
its MCP server with ``exec`` as before.

The fork server is single-threaded (forking a process with threads is unsafe) and talks to the
harness over one ``SOCK_SEQPACKET`` socket pair: the harness sends a request (the argv, with the
child's three descriptors attached); the server answers with the child's pid, and later with its
exit code once it has reaped it. When the harness goes away (the socket closes), it ends its
children (SIGTERM, then SIGKILL) and exits, so no proxy outlives the bench.
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import gc
import importlib
import itertools
import json
import os
import selectors
import signal
import socket
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from typing import IO, Any, Final, NoReturn, Self

import anyio

from mcpfault.app.argv import ENTRY_POINT, is_mcpfault_argv
from mcpfault.errors import UpstreamError

# What a stdio proxy imports on its way to relaying (cli/proxy.py and what it loads). A module that
# is gone is skipped: the child then imports what it needs itself, only slower.
PRELOAD: Final = (
    "mcpfault.cli",
    "mcpfault.cli.proxy",
    "anyio",
    "anyio._backends._asyncio",
    "anyio.to_thread",
    "mcpfault.faults.engine",
    "mcpfault.faults.profile",
    "mcpfault.proxy.core",
    "mcpfault.proxy.stdio",
    "mcpfault.proxy.summary",
    "mcpfault.proxy.events",
    "mcpfault.proxy.setup",
    "mcpfault.proxy.observe",
    "mcpfault.telemetry.logging",
    "mcpfault.telemetry.fastspans",
)
MAX_MESSAGE: Final = 1 << 20
STOP_GRACE_S: Final = 5.0


# ---- the fork server process ------------------------------------------------------------------


Run = Callable[[Sequence[str]], int]  # the command line: the argv after ``-m mcpfault`` -> exit status


@dataclass(frozen=True, slots=True)
class _Child:
    """In a forked child: what to become."""

    argv: list[str]
    cwd: str
    fds: list[int]
    run: Run | None = None


def _preload(entry_point: str) -> Run:
    """Import what a proxy needs, and prepare ``entry_point`` (``module:function``, called once here:
    the command line's parser, with the modules its subcommands import, is ~14 ms of CPU per proxy)."""
    for name in PRELOAD:
        with contextlib.suppress(ImportError):
            importlib.import_module(name)
    module, _, function = entry_point.partition(":")
    prepare: Callable[[], Run] = getattr(importlib.import_module(module), function)
    return prepare()


def serve(control: socket.socket) -> _Child | None:
    """Fork a child per request until the socket closes; returns only in a child (its request), or None at the end."""
    selector = selectors.DefaultSelector()
    selector.register(control, selectors.EVENT_READ, None)
    children: dict[int, int] = {}  # pid -> its pidfd
    try:
        while True:
            for key, _ in selector.select():
                if key.data is None:
                    try:
                        message, fds, _flags, _address = socket.recv_fds(control, MAX_MESSAGE, 3)
                    except OSError:
                        message, fds = b"", []
                    if not message:
                        return None
                    request = json.loads(message)
                    pid = os.fork()
                    if pid == 0:
                        selector.close()
                        control.close()
                        for pidfd in children.values():
                            os.close(pidfd)
                        children.clear()  # a child must not end its siblings on the way out below
                        return _Child(request["argv"], request["cwd"], fds)
                    for fd in fds:
                        os.close(fd)
                    children[pid] = os.pidfd_open(pid)
                    selector.register(children[pid], selectors.EVENT_READ, pid)
                    control.send(json.dumps({"token": request["token"], "pid": pid}).encode())
                else:
                    pid = key.data
                    _, status = os.waitpid(pid, 0)
                    selector.unregister(key.fd)
                    os.close(children.pop(pid))
                    with contextlib.suppress(OSError):
                        control.send(json.dumps({"exited": pid, "code": os.waitstatus_to_exitcode(status)}).encode())
    finally:
        if children:  # the harness left with proxies still running: end them, never leave an orphan
            _end(children)


def _end(children: dict[int, int]) -> None:
    for pid in children:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + STOP_GRACE_S
    for pid, pidfd in children.items():
        with contextlib.suppress(ChildProcessError):
            while os.waitpid(pid, os.WNOHANG) == (0, 0):
                if time.monotonic() > deadline:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)
                    os.waitpid(pid, 0)
                    break
                time.sleep(0.02)
        os.close(pidfd)


def become(child: _Child) -> NoReturn:
    """In the forked child: take the session's descriptors as stdin/stdout/stderr, run the command, exit.

    The exit is ``python -m mcpfault``'s (threads joined, exit handlers run, output flushed) except
    for the interpreter's teardown: freeing the objects inherited from the fork server would write
    to (and so copy) every page the fork shares with it, which costs more than the proxy's session.
    """
    for target, fd in enumerate(child.fds):
        os.dup2(fd, target)
    for fd in child.fds:
        if fd > 2:
            os.close(fd)
    os.chdir(child.cwd)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    sys.argv = list(child.argv)
    assert child.run is not None  # main() gives every child the prepared entry point
    try:
        code: object = child.run(child.argv[1:])
    except SystemExit as exc:
        code = exc.code
    except BaseException:  # what `python -m mcpfault` would print before exiting 1
        traceback.print_exc()
        code = 1
    for thread in threading.enumerate():
        if thread is not threading.main_thread() and not thread.daemon:
            thread.join()
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    if code is None:
        os._exit(0)
    if isinstance(code, int):
        os._exit(code & 0xFF)
    print(code, file=sys.stderr, flush=True)
    os._exit(1)


def main() -> int:
    """``python -m mcpfault.harness.forkserver FD ENTRY_POINT``: serve fork requests on socket FD."""
    control = socket.socket(fileno=int(sys.argv[1]))
    # Ctrl-C reaches the whole process group: the proxies handle it; this one ends when the harness does.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    run = _preload(sys.argv[2])
    # What the preload built lives as long as the children: keep the collector off it, so that a
    # child's collections neither scan it nor copy its pages.
    gc.freeze()
    child = serve(control)
    if child is None:
        return 0
    become(dataclasses.replace(child, run=run))


# ---- the harness's side -----------------------------------------------------------------------


def forkable(command: Sequence[str]) -> bool:
    """Whether ``command`` is ``<this python> -m mcpfault ...``, which the fork server can run."""
    return is_mcpfault_argv(command)


class _FdSendStream:
    """The write end of a pipe, as the byte stream ``StdioClient`` writes to."""

    def __init__(self, fd: int) -> None:
        os.set_blocking(fd, False)
        self._fd: int | None = fd

    async def send(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            if self._fd is None:
                raise anyio.ClosedResourceError
            try:
                view = view[os.write(self._fd, view) :]
            except BlockingIOError:
                await anyio.wait_writable(self._fd)

    async def aclose(self) -> None:
        if self._fd is not None:
            fd, self._fd = self._fd, None
            os.close(fd)


class _FdReceiveStream:
    """The read end of a pipe: chunks as they come, until end of file."""

    def __init__(self, fd: int) -> None:
        os.set_blocking(fd, False)
        self._fd: int | None = fd

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> bytes:
        while self._fd is not None:
            try:
                data = os.read(self._fd, 65536)
            except BlockingIOError:
                await anyio.wait_readable(self._fd)
                continue
            if data:
                return data
            break
        raise StopAsyncIteration

    async def aclose(self) -> None:
        if self._fd is not None:
            fd, self._fd = self._fd, None
            os.close(fd)


@dataclass(slots=True)
class ForkedProcess:
    """A proxy forked by the fork server, with the part of anyio's ``Process`` the client uses."""

    pid: int
    stdin: _FdSendStream
    stdout: _FdReceiveStream
    _exited: anyio.Event = field(default_factory=anyio.Event)
    returncode: int | None = None

    async def wait(self) -> int:
        await self._exited.wait()
        assert self.returncode is not None
        return self.returncode

    def kill(self) -> None:
        if self.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)

    async def aclose(self) -> None:
        await self.stdin.aclose()
        await self.stdout.aclose()


class ForkServer:
    """The harness's side: ``async with ForkServer.open() as server: await server.spawn(command)``."""

    def __init__(self, process: subprocess.Popen[bytes], control: socket.socket) -> None:
        self._process = process
        self._control = control
        self._tokens = itertools.count(1)
        self._started: dict[int, tuple[anyio.Event, list[int]]] = {}
        self._children: dict[int, ForkedProcess] = {}
        self._early_exits: dict[int, int] = {}  # exits that arrived before their pid was handed out

    @classmethod
    @contextlib.asynccontextmanager
    async def open(cls) -> AsyncIterator[ForkServer | None]:
        """Start the fork server; on leaving, it ends the children still running and exits.

        None where the system has no ``fork`` or no pidfds (not Linux): the proxies are then exec'd.
        """
        if not (hasattr(os, "fork") and hasattr(os, "pidfd_open") and hasattr(socket, "send_fds")):
            yield None
            return
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        with theirs:
            process = subprocess.Popen(
                [sys.executable, "-m", "mcpfault.harness.forkserver", str(theirs.fileno()), ENTRY_POINT],
                pass_fds=[theirs.fileno()],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
            )
        ours.setblocking(False)
        server = cls(process, ours)
        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(server._read)
                try:
                    yield server
                finally:
                    ours.close()  # the server's cue to end its children and exit
                    tg.cancel_scope.cancel()
        finally:
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(server._reap)

    def _reap(self) -> None:
        try:
            self._process.wait(timeout=STOP_GRACE_S + 5)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()

    async def spawn(self, command: Sequence[str], stderr: IO[bytes] | int | None = None) -> ForkedProcess:
        """Run ``command`` (``<python> -m mcpfault ...``, see ``forkable``) in a fork, stdin and stdout piped."""
        if not forkable(command):
            raise ValueError(f"the fork server runs only `{sys.executable} -m mcpfault ...`, not {command[:3]}")
        child_in, to_child = os.pipe()
        from_child, child_out = os.pipe()
        if stderr is None:
            stderr_fd = 2
        elif isinstance(stderr, int):
            stderr_fd = stderr
        else:
            stderr_fd = stderr.fileno()
        token = next(self._tokens)
        started = anyio.Event()
        slot: list[int] = []
        self._started[token] = (started, slot)
        message = json.dumps({"token": token, "argv": ["mcpfault", *command[3:]], "cwd": os.getcwd()}).encode()
        try:
            while True:
                try:
                    socket.send_fds(self._control, [message], [child_in, child_out, stderr_fd])
                    break
                except BlockingIOError:
                    await anyio.wait_writable(self._control)
        except OSError:
            for fd in (child_in, to_child, from_child, child_out):
                os.close(fd)
            self._started.pop(token, None)
            raise
        finally:
            for fd in (child_in, child_out):
                with contextlib.suppress(OSError):
                    os.close(fd)
        await started.wait()
        if not slot:
            raise UpstreamError("the bench's fork server has exited; cannot start the proxy")
        (pid,) = slot
        process = ForkedProcess(pid, _FdSendStream(to_child), _FdReceiveStream(from_child))
        self._children[pid] = process
        if pid in self._early_exits:
            self._exit(process, self._early_exits.pop(pid))
        return process

    def _exit(self, process: ForkedProcess, code: int) -> None:
        process.returncode = code
        process._exited.set()

    async def _read(self) -> None:
        try:
            while True:
                try:
                    data = self._control.recv(MAX_MESSAGE)
                except BlockingIOError:
                    await anyio.wait_readable(self._control)
                    continue
                if not data:
                    break
                message: dict[str, Any] = json.loads(data)
                if "token" in message:
                    started, slot = self._started.pop(message["token"])
                    slot.append(message["pid"])
                    started.set()
                else:
                    process = self._children.pop(message["exited"], None)
                    if process is None:
                        self._early_exits[message["exited"]] = message["code"]
                    else:
                        self._exit(process, message["code"])
        except OSError:
            pass
        finally:
            # The server is gone: nothing will report these children's exits any more.
            for process in self._children.values():
                self._exit(process, -signal.SIGKILL)
            for started, _slot in self._started.values():
                started.set()


if __name__ == "__main__":
    raise SystemExit(main())
