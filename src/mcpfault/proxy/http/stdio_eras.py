"""One stdio server per protocol era behind one ``--listen`` (``mcpfault proxy --listen ... -- SERVER_COMMAND``).

A stdio server speaks the era its first client chose: after a 2026-07-28 client it refuses the
``initialize`` of a 2025-11-25 one, and after a 2025-11-25 client a client in ``auto`` mode is quietly
downgraded. Over HTTP many clients of both eras share one endpoint, so each era gets its own server
process, as if each were the only one. Both start before the proxy listens (a command that cannot
start is refused there, and neither era's first request waits for a cold start). Messages carry their era:
``_meta`` with a protocol version or ``server/discover`` is 2026-07-28, ``initialize`` and
``notifications/initialized`` are 2025-11-25; what carries none (an answer to the server's own
request, a plain notification) goes to the server of the latest request.

The router has the interface of one ``StdioServerBridge`` (start, post, wait, stop, label), so the HTTP proxy
sees one upstream; the proxy ends, with that server's status, when either server exits.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Sequence

from mcpfault.errors import UpstreamError
from mcpfault.faults.profile import ServerSettings
from mcpfault.protocol import jsonrpc
from mcpfault.protocol.eras import META_PROTOCOL_VERSION, Era
from mcpfault.protocol.jsonrpc import MessageKind
from mcpfault.proxy.http.stdio import BridgeAnswer, StdioServerBridge
from mcpfault.proxy.process.supervisor import ProcessOps, ServerObserver, StartHook, Supervisor

_LEGACY_MARKS = frozenset({"initialize", "notifications/initialized"})


class EraRouter:
    def __init__(
        self,
        command: Sequence[str],
        *,
        kill_timeout_s: float = 5.0,
        settings: ServerSettings | None = None,
        observers: Sequence[ServerObserver] = (),
        on_start: Sequence[StartHook] = (),
    ) -> None:
        self._command = list(command)
        self._on_start = tuple(on_start)
        self._kill_timeout_s = kill_timeout_s
        self._settings = settings
        self._observers = tuple(observers)
        self._bridges: dict[Era, StdioServerBridge] = {}
        self._starting = asyncio.Lock()
        self._watchers: list[asyncio.Task[None]] = []
        self._exited: asyncio.Event | None = None
        self._exit_code = 0
        self._latest = Era.LEGACY
        self.label = StdioServerBridge(self._command).label

    @property
    def started(self) -> tuple[Era, ...]:
        """The eras whose server runs (or ran)."""
        return tuple(self._bridges)

    @property
    def supervisor(self) -> AllEras:
        """Every era's server as one: what the control API and the summary see."""
        return AllEras(self)

    async def start(self) -> None:
        """Start a server per era; a command that cannot start fails here (UpstreamError)."""
        self._exited = asyncio.Event()
        await self._bridge(Era.LEGACY)
        await self._bridge(Era.MODERN)

    async def bridge_for(self, data: bytes) -> StdioServerBridge:
        """The server of the era ``data`` belongs to (a process fault acts on it, the message goes to it)."""
        message = jsonrpc.parse(data)
        era = _era_of(message) or self._latest
        bridge = await self._bridge(era)
        if message.kind is MessageKind.REQUEST:
            self._latest = era
        return bridge

    async def post(self, data: bytes) -> BridgeAnswer:
        return await (await self.bridge_for(data)).post(data)

    async def wait(self) -> int:
        """Until one of the servers exits; its exit status."""
        assert self._exited is not None
        await self._exited.wait()
        return self._exit_code

    async def stop(self, signum: int | None = None) -> None:
        """End every era's server (``signum``: the signal that ends the proxy, forwarded to them)."""
        await asyncio.gather(*(bridge.stop(signum) for bridge in self._bridges.values()))
        for watcher in self._watchers:
            await watcher

    async def _bridge(self, era: Era) -> StdioServerBridge:
        bridge = self._bridges.get(era)
        if bridge is not None:
            return bridge
        async with self._starting:
            if era not in self._bridges:
                bridge = StdioServerBridge(
                    self._command,
                    kill_timeout_s=self._kill_timeout_s,
                    settings=self._settings,
                    observers=self._observers,
                )
                try:
                    await bridge.start()
                except UpstreamError as exc:
                    if not self._bridges:
                        raise
                    why = f"cannot start a second stdio server, for the {era.value} era: {exc}"
                    raise ConnectionError(why) from None
                self._bridges[era] = bridge
                self._watchers.append(asyncio.create_task(self._watch(bridge)))
        return self._bridges[era]

    async def _watch(self, bridge: StdioServerBridge) -> None:
        code = await bridge.wait()
        assert self._exited is not None
        if not self._exited.is_set():
            self._exit_code = code
            self._exited.set()


class AllEras:
    """The supervisors of every era's server, as one server: it is one to the clients, so the control
    API's crash, stall and restart act on each running server, and the summary adds their accounts up."""

    def __init__(self, router: EraRouter) -> None:
        self._router = router

    @property
    def _each(self) -> list[Supervisor]:
        return [bridge.supervisor for bridge in self._router._bridges.values()]

    @property
    def settings(self) -> ServerSettings:
        each = self._each
        return each[0].settings if each else ServerSettings()

    @property
    def pid(self) -> int | None:
        """The first era's server (the 2025-11-25 one): a status shows one pid."""
        return next((s.pid for s in self._each if s.pid is not None), None)

    @property
    def generation(self) -> int:
        return max((s.generation for s in self._each), default=0)

    @property
    def restarts(self) -> int:
        return sum(s.restarts for s in self._each)

    @property
    def crashes(self) -> Counter[str]:
        return sum((s.crashes for s in self._each), Counter())

    @property
    def downtimes_s(self) -> list[float]:
        return [d for s in self._each for d in s.downtimes_s]

    @property
    def ops(self) -> _EveryEraOps:
        """What a time-triggered process fault acts through: every era's server."""
        return _EveryEraOps([s.ops for s in self._each])

    async def crash(self, signal_name: str = "SIGKILL") -> None:
        await asyncio.gather(*(s.crash(signal_name) for s in self._each))

    async def stall(self, duration_s: float) -> None:
        await asyncio.gather(*(s.stall(duration_s) for s in self._each))

    async def restart(self) -> None:
        await asyncio.gather(*(s.restart() for s in self._each))


class _EveryEraOps:
    def __init__(self, each: list[ProcessOps]) -> None:
        self._each = each

    def crash(self, signal_name: str, *, delay_s: float = 0.0, cause: str = "crash") -> None:
        for ops in self._each:
            ops.crash(signal_name, delay_s=delay_s, cause=cause)

    def stall(self, duration_s: float) -> None:
        for ops in self._each:
            ops.stall(duration_s)

    def starve(self, share: float, period_s: float, duration_s: float) -> None:
        for ops in self._each:
            ops.starve(share, period_s, duration_s)

    def kill_above_rss(self, rss_mb: float, *, cause: str) -> None:
        for ops in self._each:
            ops.kill_above_rss(rss_mb, cause=cause)


def _era_of(message: jsonrpc.Message) -> Era | None:
    """The era a message says it belongs to, or None when it does not say."""
    if message.kind not in (MessageKind.REQUEST, MessageKind.NOTIFICATION):
        return None
    meta = message.params.get("_meta")
    if isinstance(meta, dict) and META_PROTOCOL_VERSION in meta:
        return Era.MODERN
    if message.method == "server/discover":
        return Era.MODERN
    if message.method in _LEGACY_MARKS:
        return Era.LEGACY
    return None
