"""The yardstick: the least a stdio relay can do.

Spawns ``SERVER_COMMAND`` as a child and copies bytes both ways with two threads doing
``os.read(fd, 65536)`` / ``os.write``: no parsing, no line splitting, no buffering beyond one
read. Whatever mcpfault adds over this is the cost of understanding the messages.

With ``--parse`` it also does the least a proxy that understands the messages must do: cut each
chunk into lines, parse each line with orjson, remember each request's id (with its method and
time) and forget it when its answer passes. That is the floor for any such proxy in CPython.

Run: ``python benchmarks/relay.py [--parse] -- SERVER_COMMAND [ARGS...]``. Exits with the child's code.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable

CHUNK = 65536


class Tracker:
    """The requests in flight, seen from both directions' lines (``--parse``)."""

    def __init__(self) -> None:
        import orjson  # only with --parse: the plain relay imports nothing beyond the standard library

        self._loads = orjson.loads
        self.pending: dict[object, tuple[str, float]] = {}

    def seen(self, *, from_client: bool) -> Callable[[bytes], None]:
        """What one direction's pump calls with each chunk (lines may span chunks)."""
        loads, pending = self._loads, self.pending
        rest = [b""]

        def lines(data: bytes) -> None:
            *whole, rest[0] = (rest[0] + data).split(b"\n")
            for line in whole:
                body = loads(line)
                if from_client:
                    if "method" in body and "id" in body:
                        pending[body["id"]] = (body["method"], time.monotonic())
                elif "id" in body:
                    pending.pop(body["id"], None)

        return lines


def _write_all(fd: int, data: bytes) -> None:
    # os.write on a pipe may write less than asked once the pipe is nearly full.
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def _pump(src: int, dst: int, on_eof: Callable[[], None] | None, seen: Callable[[bytes], None] | None = None) -> None:
    try:
        while True:
            data = os.read(src, CHUNK)
            if not data:
                break
            if seen is not None:
                seen(data)
            _write_all(dst, data)
    except OSError:
        # The other side went away (EPIPE, EBADF after close): nothing left to relay.
        pass
    finally:
        if on_eof is not None:
            on_eof()


def main(argv: list[str]) -> int:
    if "--" not in argv or argv.index("--") == len(argv) - 1 or argv[: argv.index("--")] not in ([], ["--parse"]):
        print("usage: relay.py [--parse] -- SERVER_COMMAND [ARGS...]", file=sys.stderr)
        return 2
    command = argv[argv.index("--") + 1 :]
    tracker = Tracker() if argv[0] == "--parse" else None
    child = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, bufsize=0)
    assert child.stdin is not None and child.stdout is not None
    child_in = child.stdin.fileno()
    child_out = child.stdout.fileno()
    # Daemon: it may sit in os.read(stdin) after the child has gone, and must not keep us alive.
    # Closing the child's stdin is how our EOF reaches it.
    to_child = threading.Thread(
        target=_pump,
        args=(sys.stdin.fileno(), child_in, child.stdin.close, tracker and tracker.seen(from_client=True)),
        daemon=True,
    )
    from_child = threading.Thread(
        target=_pump,
        args=(child_out, sys.stdout.fileno(), None, tracker and tracker.seen(from_client=False)),
        daemon=True,
    )
    to_child.start()
    from_child.start()
    from_child.join()
    code = child.wait()
    # Mirror a shell: a child killed by signal N exits 128 + N.
    return code if code >= 0 else 128 - code


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
