"""Record every model exchange of a run, and replay them with no API and no key.

Layout: ``DIR/manifest.json`` (what was recorded, how) and one JSON-lines file per session,
``DIR/<profile>/<agent>/s<NNN>.jsonl``, one line per request sent to the model, errors included::

    {"key": "task0003/turn02/try1", "request_sha256": "...", "request": {...}, "response": {...}}
    {"key": "task0003/turn03/try1", "request_sha256": "...", "request": {...},
     "error": {"class": "ModelRetryable", "status": 429, "error_type": "rate_limit_error", ...}}

The key says where the request sits (task index within the cell, the task's model turn, the try of
that turn); ``request_sha256`` is the digest of the whole request body. ``request`` keeps only what is
new in it (the last message, the tool names), so a recording stays small; the digest covers the rest.

Replay looks an exchange up by key and refuses it when the digest differs: same seed, same profile,
same answers give the same tool results, hence the same requests and the same outcomes; anything else
is reported (the task ends failed_detected, class ``replay_missing``), never answered from the wrong
line. Keys are never API keys: no header is recorded.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import IO, Any, Final

from mcpfault.harness.agents.llm.backend import (
    ChatRequest,
    ChatResponse,
    LLMBackend,
    ModelError,
    ModelMalformed,
    ModelRetryable,
    ModelUnavailable,
    ReplayMissing,
    parse_response,
)

FORMAT: Final = "mcpfault-llm-recording/1"
MANIFEST: Final = "manifest.json"
_UNSAFE = re.compile(r"[^A-Za-z0-9._+-]")


def session_file(root: Path, profile: str, agent: str, session: int) -> Path:
    return root / _UNSAFE.sub("_", profile) / _UNSAFE.sub("_", agent) / f"s{session:03d}.jsonl"


def write_manifest(root: Path, manifest: dict[str, Any]) -> None:
    root.mkdir(parents=True, exist_ok=True)
    (root / MANIFEST).write_text(json.dumps({"format": FORMAT, **manifest}, indent=2) + "\n", encoding="utf-8")


def _summary(request: ChatRequest) -> dict[str, Any]:
    return {
        "model": request.model,
        "max_tokens": request.max_tokens,
        "messages": len(request.messages),
        "last_message": dict(request.messages[-1]) if request.messages else None,
        "tools": [str(t.get("name")) for t in request.tools],
    }


def _error(exc: ModelError) -> dict[str, Any]:
    error: dict[str, Any] = {"class": type(exc).__name__, "message": str(exc)}
    if isinstance(exc, ModelRetryable):
        error |= {"status": exc.status, "error_type": exc.error_type, "retry_after_s": exc.retry_after_s}
    return error


class RecordingBackend:
    """Passes every request to ``inner`` and writes the exchange, answer or error, to ``path``."""

    def __init__(self, inner: LLMBackend, path: Path) -> None:
        self.name = inner.name
        self._inner = inner
        path.parent.mkdir(parents=True, exist_ok=True)
        self._out: IO[str] = path.open("w", encoding="utf-8")  # a rerun of the session records afresh

    async def create(self, request: ChatRequest) -> ChatResponse:
        line: dict[str, Any] = {"key": request.key, "request_sha256": request.digest(), "request": _summary(request)}
        try:
            response = await self._inner.create(request)
        except ModelError as exc:
            line["error"] = _error(exc)
            self._write(line)
            raise
        line["response"] = dict(response.raw)
        self._write(line)
        return response

    def _write(self, line: dict[str, Any]) -> None:
        self._out.write(json.dumps(line, ensure_ascii=False, separators=(",", ":")) + "\n")
        self._out.flush()

    async def aclose(self) -> None:
        self._out.close()
        await self._inner.aclose()


class ReplayBackend:
    """Answers from a recording: the same exchange for the same key and request, or ReplayMissing."""

    name = "replay"

    def __init__(self, root: Path, path: Path) -> None:
        self._root, self._path = root, path
        self._lines: dict[str, dict[str, Any]] = {}
        self._problem: str | None = None
        try:
            text = path.read_text(encoding="utf-8")
        except OSError:
            self._problem = f"--replay {root}: no recording for this session ({path.relative_to(root)} is missing)"
            return
        for number, raw in enumerate(text.split("\n"), 1):  # not splitlines(): U+2028 is raw in JSON strings
            if not raw.strip():
                continue
            try:
                line = json.loads(raw)
                self._lines[str(line["key"])] = line
            except (ValueError, KeyError, TypeError):
                self._problem = f"--replay {root}: {path.relative_to(root)}:{number} is not a recorded exchange"
                return

    async def create(self, request: ChatRequest) -> ChatResponse:
        where = f"{self._path.relative_to(self._root)} key {request.key}"
        if self._problem is not None:
            raise ReplayMissing(f"{self._problem}; wanted {where}")
        line = self._lines.get(request.key)
        if line is None:
            raise ReplayMissing(f"--replay {self._root}: no recorded exchange {where}")
        if line.get("request_sha256") != request.digest():
            raise ReplayMissing(
                f"--replay {self._root}: the exchange recorded at {where} answered a different request "
                "(other seed, profile, tools or prompt?)"
            )
        error = line.get("error")
        if isinstance(error, dict):
            raise _replayed_error(error)
        return parse_response(line.get("response"))

    async def aclose(self) -> None:
        """Nothing to release."""


def _replayed_error(error: dict[str, Any]) -> ModelError:
    message = str(error.get("message", ""))
    kind = error.get("class")
    if kind == "ModelRetryable":
        status = error.get("status")
        # No waiting in a replay: the outcome does not depend on how long the model API asked to wait.
        return ModelRetryable(
            message,
            status=status if isinstance(status, int) else None,
            error_type=str(error.get("error_type", "")),
            retry_after_s=0.0,
        )
    if kind == "ModelMalformed":
        return ModelMalformed(message)
    if kind == "ReplayMissing":
        return ReplayMissing(message)
    return ModelUnavailable(message)
