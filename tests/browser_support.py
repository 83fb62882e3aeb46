"""Debian's chromium, headless, driven over the Chrome DevTools Protocol (CDP) from Python.

No browser download and no driver: the test suite runs ``/usr/bin/chromium`` (``make test`` installs
Debian's package) with a fresh profile, finds its DevTools port in the profile's ``DevToolsActivePort``
file, and speaks CDP over the page's websocket (the ``websockets`` library). Every network request the
page makes is recorded from ``Network.requestWillBeSent``, every uncaught script error from
``Runtime.exceptionThrown``, so a test can say the page asked for nothing and broke nowhere.
"""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from websockets.sync.client import ClientConnection, connect

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-dev-shm-usage",
    "--remote-debugging-address=127.0.0.1",
    "--remote-debugging-port=0",
)
START_TIMEOUT_S = 60.0


class Page:
    """One browser tab over CDP: commands answered in order, events kept as they come."""

    def __init__(self, socket: ClientConnection) -> None:
        self._socket = socket
        self._next_id = 0
        self.events: list[dict[str, Any]] = []

    def send(self, method: str, timeout_s: float = 30.0, **params: Any) -> dict[str, Any]:
        self._next_id += 1
        message_id = self._next_id
        self._socket.send(json.dumps({"id": message_id, "method": method, "params": params}))
        deadline = time.monotonic() + timeout_s
        while True:
            message = json.loads(self._socket.recv(timeout=max(0.1, deadline - time.monotonic())))
            if message.get("id") == message_id:
                if "error" in message:
                    raise RuntimeError(f"CDP {method}: {message['error']}")
                result: dict[str, Any] = message.get("result", {})
                return result
            self.events.append(message)

    def wait_for(self, event: str, timeout_s: float = 30.0) -> dict[str, Any]:
        """The first ``event`` not seen before (it may have come while a command was answered)."""
        deadline = time.monotonic() + timeout_s
        while True:
            for index, seen in enumerate(self.events):
                if seen.get("method") == event:
                    return self.events.pop(index)
            message = json.loads(self._socket.recv(timeout=max(0.1, deadline - time.monotonic())))
            if "id" not in message:
                self.events.append(message)

    def evaluate(self, expression: str) -> Any:
        """The JSON value of ``expression`` in the page; a script error raises."""
        result = self.send("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression!r} raised in the page: {result['exceptionDetails']}")
        return result["result"].get("value")

    def open(self, url: str) -> None:
        self.send("Page.navigate", url=url)
        self.wait_for("Page.loadEventFired")

    def screenshot(self, path: Path, width: int = 1280) -> Path:
        """The whole page as a PNG at ``path``."""
        height = int(self.evaluate("document.documentElement.scrollHeight"))
        self.send("Emulation.setDeviceMetricsOverride", width=width, height=height, deviceScaleFactor=1, mobile=False)
        shot = self.send("Page.captureScreenshot", format="png", captureBeyondViewport=True)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(shot["data"]))
        return path

    def screenshot_of(self, selector: str, path: Path) -> Path:
        """The element ``selector`` finds (with a margin), as a PNG at ``path``: what a reviewer looks at."""
        box = self.evaluate(
            f"(() => {{ const r = document.querySelector({json.dumps(selector)}).getBoundingClientRect(); "
            "return [r.left + window.scrollX, r.top + window.scrollY, r.width, r.height]; })()"
        )
        left, top, width, height = (float(v) for v in box)
        clip = {"x": max(0.0, left - 8), "y": max(0.0, top - 8), "width": width + 16, "height": height + 16, "scale": 1}
        shot = self.send("Page.captureScreenshot", format="png", captureBeyondViewport=True, clip=clip)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(shot["data"]))
        return path

    def requests(self) -> list[str]:
        """The URL of every request the page has made so far."""
        return [e["params"]["request"]["url"] for e in self.events if e.get("method") == "Network.requestWillBeSent"]

    def errors(self) -> list[str]:
        """Uncaught script errors and console errors (a refused request, a policy violation)."""
        found = [
            str(e["params"]["exceptionDetails"]) for e in self.events if e.get("method") == "Runtime.exceptionThrown"
        ]
        found += [
            " ".join(str(a.get("value", a.get("description", ""))) for a in e["params"].get("args", ()))
            for e in self.events
            if e.get("method") == "Runtime.consoleAPICalled" and e["params"].get("type") == "error"
        ]
        found += [
            str(e["params"]["entry"])
            for e in self.events
            if e.get("method") == "Log.entryAdded" and e["params"]["entry"].get("level") == "error"
        ]
        return found


@contextmanager
def chromium(profile_dir: Path) -> Iterator[Page]:
    """A headless chromium with a fresh profile in ``profile_dir``, and its one tab, watched."""
    profile_dir.mkdir(parents=True, exist_ok=True)
    process = subprocess.Popen(
        [CHROMIUM, *FLAGS, f"--user-data-dir={profile_dir}", "about:blank"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        port = _devtools_port(profile_dir, process)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10) as answer:
            targets = json.load(answer)
        page_url = next(t["webSocketDebuggerUrl"] for t in targets if t.get("type") == "page")
        with connect(page_url, max_size=None, open_timeout=10) as socket:
            page = Page(socket)
            for domain in ("Page", "Network", "Runtime", "Log"):
                page.send(f"{domain}.enable")
            yield page
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _devtools_port(profile_dir: Path, process: subprocess.Popen[bytes]) -> int:
    """The port chromium chose (``--remote-debugging-port=0``), from the file it writes once listening."""
    active = profile_dir / "DevToolsActivePort"
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{CHROMIUM} exited with status {process.returncode} before listening")
        try:
            first = active.read_text().splitlines()[0]
        except (OSError, IndexError):
            time.sleep(0.05)
            continue
        return int(first)
    raise RuntimeError(f"{CHROMIUM} did not write {active} within {START_TIMEOUT_S:.0f} s")
