"""mcpfault's pytest plugin (entry point ``pytest11``): test an agent under faults in CI.

- ``mcpfault_proxy``: a fixture factory. ``mcpfault_proxy(profile=NAME | PATH | dict, command=[...],
  transport="stdio" | "http")`` returns a started ``mcpfault.api.Proxy``; every proxy it made stops
  at the test's teardown. ``command`` defaults to the bundled mock server.
- ``mcpfault_bench``: your agent under faults. ``mcpfault_bench(agent_command=[...], profile=..., tasks=N)``
  runs the command as an external agent (the ``MCPFAULT_*`` contract, README "Your agent") on N tasks
  and returns the judged outcomes (``mcpfault.api.AgentRun``): ``assert not run.silent``.
- ``@pytest.mark.mcpfault(profile=..., seed=...)``: the defaults of the proxies a test makes.
- ``--mcpfault-seed N``: the seed of every proxy of the run (to replay a failure CI reported); it
  wins over the marker's seed, which wins over the profile's.
- When a test fails, its report gets a section "mcpfault: faults injected" listing each fault with
  its request id and span id (assert with ``proxy.injected("timeout") >= 1`` and ``proxy.fault_for(tool)``).
- ``@pytest.mark.mcpfault_cassette("path", record="none|once|all")``: the proxies' server is a cassette
  (vcrpy's record modes): ``once`` records against the real ``command`` when the file is missing and
  replays it after; ``none`` only replays (a missing file is an error); ``all`` always records again.
  A relative path is taken from the test file's directory.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from mcpfault.app.argv import mcpfault_argv

if TYPE_CHECKING:
    from mcpfault.api import Proxy

MARKER = "mcpfault"
CASSETTE_MARKER = "mcpfault_cassette"
RECORD_MODES = ("none", "once", "all")
SECTION = "mcpfault: faults injected"
_PROXIES = pytest.StashKey[list["Proxy"]]()
MOCK_SERVER = tuple(mcpfault_argv("mock-server"))


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("mcpfault", "fault injection for MCP servers (mcpfault)")
    group.addoption(
        "--mcpfault-seed",
        type=int,
        default=None,
        metavar="N",
        help="seed every mcpfault proxy with N (wins over @pytest.mark.mcpfault(seed=...) and the profile's)",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "mcpfault(profile=NAME|PATH|dict, seed=N): defaults of the proxies the mcpfault_proxy fixture makes",
    )
    config.addinivalue_line(
        "markers",
        "mcpfault_cassette(path, record='none|once|all'): the mcpfault_proxy fixture's server records to or "
        "replays from this cassette",
    )


MakeProxy = Callable[..., "Proxy"]


@pytest.fixture
def mcpfault_proxy(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[MakeProxy]:
    """A factory of started proxies: ``mcpfault_proxy(profile=..., command=[...], transport=...)``."""
    from mcpfault.api import Proxy

    marker = request.node.get_closest_marker(MARKER)
    defaults: dict[str, Any] = dict(marker.kwargs) if marker is not None else {}
    unknown = set(defaults) - {"profile", "seed"}
    if unknown or (marker is not None and marker.args):
        raise pytest.UsageError(f"@pytest.mark.mcpfault takes profile= and seed= only; got {marker}")
    option_seed = request.config.getoption("--mcpfault-seed")
    through_cassette = _cassette_wrapper(request)
    made: list[Proxy] = []
    request.node.stash[_PROXIES] = made

    def make(
        profile: Any = None,
        command: Sequence[str] | None = None,
        transport: str = "stdio",
        seed: int | None = None,
        **options: Any,
    ) -> Proxy:
        chosen_seed = option_seed if option_seed is not None else seed if seed is not None else defaults.get("seed")
        chosen_profile = profile if profile is not None else defaults.get("profile", "baseline")
        workdir = tmp_path_factory.mktemp("mcpfault-proxy")
        server = list(command) if command is not None else list(MOCK_SERVER)
        proxy = Proxy(
            through_cassette(server),
            profile=chosen_profile,
            transport=transport,  # type: ignore[arg-type]  # Proxy checks it and says what is allowed
            seed=chosen_seed,
            workdir=workdir,
            **options,
        )
        made.append(proxy)
        return proxy.start()

    try:
        yield make
    finally:
        for proxy in made:
            proxy.close()


@pytest.fixture
def mcpfault_bench(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Callable[..., Any]:
    """``mcpfault_bench(agent_command=[...], profile=..., tasks=N, ...)``: your agent's judged outcomes."""
    from mcpfault.api import agent_bench

    marker = request.node.get_closest_marker(MARKER)
    defaults: dict[str, Any] = dict(marker.kwargs) if marker is not None else {}
    option_seed = request.config.getoption("--mcpfault-seed")

    def bench(
        agent_command: Sequence[str], profile: Any = None, tasks: int = 4, seed: int | None = None, **options: Any
    ) -> Any:
        chosen_seed = option_seed if option_seed is not None else seed if seed is not None else defaults.get("seed", 0)
        return agent_bench(
            agent_command,
            profile=profile if profile is not None else defaults.get("profile", "mixed"),
            tasks=tasks,
            seed=chosen_seed,
            out_dir=tmp_path_factory.mktemp("mcpfault-agent"),
            **options,
        )

    return bench


def _cassette_wrapper(request: pytest.FixtureRequest) -> Callable[[list[str]], list[str]]:
    """What the server command becomes under ``@pytest.mark.mcpfault_cassette`` (unchanged without it)."""
    marker = request.node.get_closest_marker(CASSETTE_MARKER)
    if marker is None:
        return lambda command: command
    if len(marker.args) != 1 or set(marker.kwargs) - {"record"}:
        raise pytest.UsageError(f"@pytest.mark.mcpfault_cassette takes one path and record= only; got {marker}")
    mode = marker.kwargs.get("record", "once")
    if mode not in RECORD_MODES:
        raise pytest.UsageError(
            f"@pytest.mark.mcpfault_cassette(record={mode!r}): use one of {', '.join(RECORD_MODES)}"
        )
    path = Path(str(marker.args[0]))
    if not path.is_absolute():
        path = Path(str(request.node.path)).parent / path
    cli = mcpfault_argv()
    if mode == "all" or (mode == "once" and not path.exists()):
        return lambda command: [*cli, "record", "--out", str(path), "--", *command]
    if not path.exists():
        raise pytest.UsageError(
            f"@pytest.mark.mcpfault_cassette: {path} does not exist and record='none' only replays; "
            "record it once with record='once'"
        )
    return lambda command: [*cli, "replay", str(path)]


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, Any, None]:
    outcome = yield
    report: pytest.TestReport = outcome.get_result()
    proxies = item.stash.get(_PROXIES, None)
    if not proxies or not report.failed:
        return
    report.sections.append((SECTION, "\n".join(_describe(proxies))))


def _describe(proxies: Sequence[Proxy]) -> Iterator[str]:
    for number, proxy in enumerate(proxies, 1):
        try:
            faults = proxy.faults()
        except Exception as exc:  # the report must not fail over records it cannot read
            yield f"proxy {number}: its records could not be read ({exc})"
            continue
        where = f"{proxy.transport} {proxy.url}" if proxy.url else proxy.transport
        profile = Path(str(proxy.profile_path)).name
        seed = proxy.seed if proxy.seed is not None else _profile_seed(proxy.profile_path)
        count = f"{len(faults)} fault" + ("" if len(faults) == 1 else "s")
        yield f"proxy {number} ({where}, profile {profile}, seed {seed}): {count}"
        for fault in faults:
            target = f"{fault.method} {fault.tool}" if fault.tool else fault.method
            yield (
                f"  {fault.type}/{fault.mode} rule={fault.rule} {target} request_id={fault.request_id} "
                f"span_id={fault.span_id or '-'} trace_id={fault.trace_id or '-'}"
            )


def _profile_seed(path: Path | None) -> str:
    """The seed the profile file sets (what the proxy ran with when no seed was given), for the report."""
    import tomllib

    try:
        seed = tomllib.loads(Path(str(path)).read_text()).get("seed")
    except (OSError, tomllib.TOMLDecodeError):
        return "unknown"
    return str(seed) if seed is not None else "none (unseeded)"
