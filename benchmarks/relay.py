"""The yardstick: the least a stdio relay can do.

Spawns ``SERVER_COMMAND`` as a child and copies bytes both ways with two threads doing
``os.read(fd, 65536)`` / ``os.write``: no parsing, no line splitting, no buffering beyond one
read. Whatever mcpfault adds over this is the cost of understanding the messages.

Run: ``python benchmarks/relay.py -- SERVER_COMMAND [ARGS...]``. Exits with the child's code.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Callable

CHUNK = 65536


def _write_all(fd: int, data: bytes) -> None:
    # os.write on a pipe may write less than asked once the pipe is nearly full.
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def _pump(src: int, dst: int, on_eof: Callable[[], None] | None) -> None:
    try:
        while True:
            data = os.read(src, CHUNK)
            if not data:
                break
            _write_all(dst, data)
    except OSError:
        # The other side went away (EPIPE, EBADF after close): nothing left to relay.
        pass
    finally:
        if on_eof is not None:
            on_eof()


def main(argv: list[str]) -> int:
    if "--" not in argv or argv.index("--") == len(argv) - 1:
        print("usage: relay.py -- SERVER_COMMAND [ARGS...]", file=sys.stderr)
        return 2
    command = argv[argv.index("--") + 1 :]
    child = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, bufsize=0)
    assert child.stdin is not None and child.stdout is not None
    child_in = child.stdin.fileno()
    child_out = child.stdout.fileno()
    # Daemon: it may sit in os.read(stdin) after the child has gone, and must not keep us alive.
    # Closing the child's stdin is how our EOF reaches it.
    to_child = threading.Thread(target=_pump, args=(sys.stdin.fileno(), child_in, child.stdin.close), daemon=True)
    from_child = threading.Thread(target=_pump, args=(child_out, sys.stdout.fileno(), None), daemon=True)
    to_child.start()
    from_child.start()
    from_child.join()
    code = child.wait()
    # Mirror a shell: a child killed by signal N exits 128 + N.
    return code if code >= 0 else 128 - code


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
