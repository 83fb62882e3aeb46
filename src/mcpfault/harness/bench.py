"""The benchmark matrix: profiles x agents, each cell's tasks split into sessions run side by side.

A cell's tasks run in sessions of ``session_tasks`` (each a fresh proxy and mock server), because a
lost response costs a whole deadline and sequential sessions would spend most of their time
waiting; sessions of all cells run ``jobs`` at a time. Inside a session tasks are sequential, so
the same seed gives the same faults, hence the same outcome counts (timings aside).
"""

from __future__ import annotations

import dataclasses
import json
import math
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio

from mcpfault.analysis.records import TaskRecord, read_records, row_name
from mcpfault.analysis.server import ServerAccount, read_accounts
from mcpfault.analysis.summary import AGENT_ORDER, GENTLE_PROFILES, PROCESS_PROFILES, STRESS_PROFILES
from mcpfault.analysis.traces import SPAN_FILES
from mcpfault.errors import UsageError
from mcpfault.faults import profile as profiles
from mcpfault.harness.agents.policies import DEFAULT_TASK_DEADLINE_S
from mcpfault.harness.agents.roster import check_agent_name
from mcpfault.harness.agents.tasks import WORKFLOWS, cassette_tasks, check_workflows, plan_tasks
from mcpfault.harness.client import Era
from mcpfault.harness.forkserver import ForkServer
from mcpfault.harness.session import SessionPlan, SessionResult, run_session
from mcpfault.mock.world import World
from mcpfault.telemetry.names import TRANSPORT_HTTP, TRANSPORT_STDIO, TRANSPORTS
from mcpfault.telemetry.span_files import compress_span_files

if TYPE_CHECKING:
    from mcpfault.harness.agents.external import ExternalConfig
    from mcpfault.harness.agents.llm.agent import LLMConfig

DEFAULT_PROFILES = GENTLE_PROFILES
# Names that stand for a set of bundled profiles in ``bench --profiles``.
PROFILE_SETS = {"gentle": GENTLE_PROFILES, "stress": STRESS_PROFILES, "process": PROCESS_PROFILES}
DEFAULT_AGENTS = AGENT_ORDER
SERVER_ACCOUNTS = "server.jsonl"  # beside records.jsonl: each session's server crashes, restarts, downtime
# Profiles whose sessions wait the most start first, so the slowest work is not left for last.
SLOW_FIRST = {"timeout": 0, "latency": 1, "mixed": 2, "malformed": 3}


@dataclass(frozen=True, slots=True)
class BenchConfig:
    profiles: tuple[Path, ...]
    agents: tuple[str, ...]
    out_dir: Path
    tasks: int = 100
    session_tasks: int = 20
    seed: int = 0
    jobs: int = 16
    deadline_s: float = 0.5
    task_deadline_s: float = DEFAULT_TASK_DEADLINE_S  # each task's own deadline (--task-deadline-s)
    workflows: tuple[str, ...] = WORKFLOWS
    traces: bool = True  # every session writes the spans of its three processes; outcomes come from them
    otlp_endpoint: str | None = None  # and exports them there too
    shard: tuple[int, int] | None = None  # (index, count): run only this disjoint slice of the sessions
    trials: int = 1  # runs of every cell, each with its own derived fault seeds (pass^k needs k >= 2)
    seeds: int = 1  # the whole matrix once per seed, seed .. seed+seeds-1 (world, tasks and faults each)
    # What the agent name "llm" stands for: one model variant per entry (model x reliability hints).
    llm: tuple[LLMConfig, ...] = ()
    probe: str | None = None  # every session's proxy runs with --probe this (see SessionPlan.probe)
    # How agents reach the proxy: stdio, http (the Streamable HTTP bridge), or both (a row per transport).
    transports: tuple[str, ...] = (TRANSPORT_STDIO,)
    era: Era = "legacy"  # the client's protocol era (over HTTP: 2025-11-25 sessions, or 2026-07-28 stateless)
    # Profiles only the HTTP transport runs (bench --transport http or both adds `http`); stdio skips them.
    http_only: tuple[Path, ...] = ()
    external: tuple[ExternalConfig, ...] = ()  # what each cmd:NAME among the agents runs
    # Each session's span files gzipped once it is judged (NAME.jsonl.gz: ~70% of a run directory's bytes
    # were spans); every reader takes either form. bench --plain-spans keeps them as written.
    compress_spans: bool = True
    # --server-cassette: every session's server replays this recording; its tasks are --tasks trials of
    # ``cassette_task`` (the user's own instruction), judged without ground truth.
    server_cassette: Path | None = None
    cassette_task: str = ""


@dataclass(frozen=True, slots=True)
class BrokenSession:
    """A session that broke (or whose joins disagreed): its cell's figures are not to be trusted."""

    profile: str
    agent: str
    session: int
    error: str

    def as_dict(self) -> dict[str, Any]:
        return {"profile": self.profile, "agent": self.agent, "session": self.session, "error": self.error}


@dataclass(slots=True)
class BenchResult:
    records: list[TaskRecord] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    wall_s: float = 0.0
    sessions: int = 0
    latencies: list[tuple[float, float]] = field(default_factory=list)
    broken: list[BrokenSession] = field(default_factory=list)  # the sessions behind ``errors``
    servers: list[ServerAccount] = field(default_factory=list)  # each session's server, where anything befell it

    def proxy_overhead(self) -> dict[str, float] | None:
        """Medians over calls no fault touched: what the client waited, what the server took, the difference."""
        if not self.latencies:
            return None
        client = sorted(c for c, _ in self.latencies)
        upstream = sorted(u for _, u in self.latencies)
        added = sorted(c - u for c, u in self.latencies)

        def at(values: list[float], share: float) -> float:
            return round(1000 * values[min(len(values) - 1, int(share * len(values)))], 3)

        return {
            "calls": float(len(self.latencies)),
            "client_p50_ms": at(client, 0.5),
            "upstream_p50_ms": at(upstream, 0.5),
            "added_p50_ms": at(added, 0.5),
            "added_p95_ms": at(added, 0.95),
        }


def expand_profile_names(option: str | None) -> list[str]:
    """``--profiles``: names, paths and the set names ``gentle``, ``stress`` and ``process``, in order, each once."""
    names = [n.strip() for n in option.split(",") if n.strip()] if option else list(DEFAULT_PROFILES)
    expanded = [member for name in names for member in PROFILE_SETS.get(name, (name,))]
    return list(dict.fromkeys(expanded))


def resolve_profile(name_or_path: str) -> Path:
    """A profile by path, or by name from the bundled profiles; a clear error otherwise."""
    return profiles.resolve(name_or_path)


def fault_seed(profile_seed: int, seed: int, session: int = 0, trial: int = 0) -> int:
    """The proxy's seed for one session: each session of a cell draws its own faults, the same for every
    agent, derived per trial; ``--seed`` reseeds them (``run --seed S`` meets the faults of bench's first
    session). Trial 0 keeps the seed a bench without --trials uses, so ``--trials 1`` changes nothing."""
    return profile_seed * 1_000_003 + seed * 1009 + session + trial * TRIAL_STRIDE


def seed_worlds(config: BenchConfig, world: World) -> dict[int, World]:
    """The world of every seed the bench runs (``world`` is the first seed's)."""
    if config.seeds < 1:
        raise UsageError(f"--seeds {config.seeds}: give at least 1")
    return {seed: world if seed == config.seed else World.generate(seed) for seed in seed_range(config)}


def seed_range(config: BenchConfig) -> range:
    return range(config.seed, config.seed + config.seeds)


def plan_sessions(config: BenchConfig, world: World) -> list[SessionPlan]:
    """Every session of the matrix, of every seed; with --seeds N > 1 each seed's under sessions/seed-S/."""
    if config.seeds < 1:
        raise UsageError(f"--seeds {config.seeds}: give at least 1")
    if config.seeds == 1:
        return _plan_one_seed(config, world)
    plans = []
    for seed, seed_world in seed_worlds(config, world).items():
        one = dataclasses.replace(config, seed=seed, seeds=1, out_dir=config.out_dir / f"seed-{seed}", shard=None)
        plans += _plan_one_seed(one, seed_world)
    return _shard_and_order(config, plans)


def _plan_one_seed(config: BenchConfig, world: World) -> list[SessionPlan]:
    if config.tasks < 1 or config.session_tasks < 1:
        raise UsageError("--tasks and --session-tasks must be at least 1")
    if config.server_cassette is not None:
        tasks = cassette_tasks(config.tasks, config.cassette_task)
    else:
        tasks = plan_tasks(world, config.tasks, config.seed, workflows=check_workflows(config.workflows))
    count = math.ceil(config.tasks / config.session_tasks)
    if config.trials < 1:
        raise UsageError(f"--trials {config.trials}: give at least 1")
    plans = []
    externals = {e.label: e for e in config.external}
    for transport, profile_path in _transport_profiles(config):
        loaded = profiles.load(profile_path)  # refuses an invalid profile before anything starts
        for agent, llm in _agent_variants(config):
            for trial in range(config.trials):
                for session in range(count):
                    chunk = tasks[session * config.session_tasks : (session + 1) * config.session_tasks]
                    # stdio sessions keep the directories they always had; HTTP ones go under http/
                    sessions_dir = config.out_dir / "sessions"
                    if transport != TRANSPORT_STDIO:
                        sessions_dir = sessions_dir / transport
                    cell_dir = sessions_dir / loaded.name / agent
                    plans.append(
                        SessionPlan(
                            profile=profile_path,
                            profile_name=loaded.name,
                            agent=agent,
                            llm=llm,
                            external=externals.get(agent),
                            tasks=tuple(chunk),
                            out_dir=(cell_dir / f"t{trial:02d}" if config.trials > 1 else cell_dir) / f"s{session:03d}",
                            world_seed=config.seed,
                            proxy_seed=fault_seed(loaded.seed, config.seed, session, trial),
                            session=session,
                            trial=trial,
                            deadline_s=config.deadline_s,
                            task_deadline_s=config.task_deadline_s,
                            traces=config.traces,
                            otlp_endpoint=config.otlp_endpoint,
                            probe=config.probe,
                            transport=transport,
                            era=config.era,
                            server_cassette=config.server_cassette,
                        )
                    )
    return _shard_and_order(config, plans)


def _shard_and_order(config: BenchConfig, plans: list[SessionPlan]) -> list[SessionPlan]:
    if config.shard is not None:
        index, shards = config.shard
        # Sessions are numbered in one fixed order (profile, agent, session), so the N slices are
        # disjoint, cover the matrix, and each session runs exactly as it would unsharded.
        plans.sort(key=lambda p: (p.transport, p.profile_name, p.agent, p.world_seed, p.trial, p.session))
        plans = plans[index::shards]
    plans.sort(key=lambda p: SLOW_FIRST.get(p.profile_name, len(SLOW_FIRST)))
    return plans


TRIAL_STRIDE = 7_919  # a prime well above any cell's session count: trials never share a seed


def bench_warnings(config: BenchConfig) -> list[str]:
    """The profile warnings (faults.profile_warnings) of every profile of the matrix, in its sessions."""
    from mcpfault.faults.profile_warnings import Timing, warnings_of

    timing = Timing(config.session_tasks, config.deadline_s)
    warnings: list[str] = []
    for path in dict.fromkeys([*config.profiles, *config.http_only]):
        warnings += [warning.located() for warning in warnings_of(profiles.load(path), timing)]
    return warnings


def fixed_profiles(config: BenchConfig) -> tuple[str, ...]:
    """The matrix's profiles with nothing random in them (Profile.is_fixed): one scenario each, not a sample."""
    loaded = [profiles.load(path) for path in dict.fromkeys([*config.profiles, *config.http_only])]
    return tuple(p.name for p in loaded if p.is_fixed())


def parse_transports(option: str) -> tuple[str, ...]:
    """``--transport``: stdio, http, or both (stdio then http)."""
    if option == "both":
        return TRANSPORTS
    if option not in TRANSPORTS:
        raise UsageError(f"--transport {option!r}: choose stdio, http or both")
    return (option,)


def matrix_rows(config: BenchConfig) -> tuple[str, ...]:
    """The report's rows in the order --profiles gave them (sessions run slowest first, not in this order)."""
    from mcpfault.analysis.records import row_name

    return tuple(dict.fromkeys(row_name(profiles.load(p).name, t) for t, p in _transport_profiles(config)))


def _transport_profiles(config: BenchConfig) -> list[tuple[str, Path]]:
    """(transport, profile) for every row of the matrix: each profile per transport, the HTTP-only ones
    over HTTP alone (behind the stdio proxy their rules never fire)."""
    rows = []
    for transport in config.transports:
        if transport == TRANSPORT_HTTP:
            rows += [(transport, path) for path in dict.fromkeys([*config.profiles, *config.http_only])]
        else:
            rows += [(transport, path) for path in config.profiles if path not in config.http_only]
    return rows


def _agent_variants(config: BenchConfig) -> list[tuple[str, LLMConfig | None]]:
    """(agent label, its model variant): scripted agents as named, "llm" once per model variant."""
    variants: list[tuple[str, LLMConfig | None]] = []
    for agent in config.agents:
        if agent.startswith("cmd:"):  # an external agent: its config comes with the plan (config.external)
            if agent not in {e.label for e in config.external}:
                raise UsageError(f'agent {agent!r} has no command: add --agent-command {agent[4:]}="COMMAND LINE"')
            variants.append((agent, None))
            continue
        if agent != "llm":
            variants.append((check_agent_name(agent), None))
            continue
        llm = config.llm
        if not llm:
            from mcpfault.harness.agents.llm.agent import LLMConfig

            llm = (LLMConfig(),)
        variants += [(variant.label, variant) for variant in llm]
    return variants


def parse_shard(text: str) -> tuple[int, int]:
    """``I/N`` (0 <= I < N), as Kubernetes' JOB_COMPLETION_INDEX counts from 0."""
    try:
        index_text, count_text = text.split("/")
        index, count = int(index_text), int(count_text)
    except ValueError:
        raise UsageError(f"--shard {text!r}: write INDEX/COUNT, e.g. 0/4 (indices count from 0)") from None
    if count < 1 or not 0 <= index < count:
        raise UsageError(f"--shard {text!r}: need 0 <= INDEX < COUNT, e.g. 3/4 is the last of 4 shards")
    return index, count


async def run_bench(
    config: BenchConfig,
    plans: Sequence[SessionPlan],
    world: World,
    on_task_done: Callable[[], None],
    on_session_done: Callable[[Sequence[TaskRecord]], None] = lambda _records: None,
) -> BenchResult:
    result = BenchResult(sessions=len(plans))
    started = time.monotonic()
    limiter = anyio.CapacityLimiter(max(1, config.jobs))
    finished: list[SessionResult] = []
    worlds = seed_worlds(config, world)

    async def one(plan: SessionPlan, launcher: ForkServer | None) -> None:
        async with limiter:
            session = await run_session(plan, worlds.get(plan.world_seed, world), on_task_done, launcher)
            if config.compress_spans:  # judged by now: the spans are read again only by traces show/export
                await anyio.to_thread.run_sync(compress_span_files, plan.out_dir, SPAN_FILES)
            finished.append(session)
            on_session_done(session.records)

    # One warm interpreter forks every session's proxy: the import a proxy start costs, paid once.
    async with ForkServer.open() as launcher, anyio.create_task_group() as tg:
        for plan in plans:
            tg.start_soon(one, plan, launcher)
    result.wall_s = time.monotonic() - started
    order = {id(p): i for i, p in enumerate(plans)}
    for session in sorted(
        finished,
        key=lambda s: (
            s.plan.transport,
            s.plan.profile_name,
            s.plan.agent,
            s.plan.world_seed,
            s.plan.trial,
            s.plan.session,
            order[id(s.plan)],
        ),
    ):
        result.records.extend(session.records)
        result.latencies.extend(session.latencies)
        if session.server is not None and not session.server.empty:
            result.servers.append(session.server)
        if session.error:
            result.errors.append(session.error)
            plan = session.plan
            row = row_name(plan.profile_name, plan.transport)
            result.broken.append(BrokenSession(row, plan.agent, plan.session, session.error))
    return result


@dataclass(frozen=True, slots=True)
class MergedResults:
    records: list[TaskRecord]
    seed: int
    tasks_per_cell: int
    wall_s: float  # the slowest shard's
    jobs: int  # summed over shards
    started_at: str  # the earliest shard's
    missing: tuple[str, ...] = ()  # shards (I/N) not given: only with allow_partial
    broken: tuple[BrokenSession, ...] = ()  # every shard's
    trials: int = 1
    servers: tuple[ServerAccount, ...] = ()  # every shard's server.jsonl


def merge_results(directories: Sequence[Path], *, allow_partial: bool = False) -> MergedResults:
    """The records of bench shards as one matrix; refuses overlapping shards, mixed seeds and, unless
    ``allow_partial``, an incomplete set of shards (a Kubernetes Indexed Job that lost a pod)."""
    records: list[TaskRecord] = []
    servers: list[ServerAccount] = []
    metas: list[dict[str, Any]] = []
    for directory in directories:
        path = directory / "records.jsonl"
        if not path.is_file():
            raise UsageError(f"{path} does not exist; give the --out directories of bench runs")
        try:
            records.extend(read_records(path))
        except ValueError as exc:
            raise UsageError(str(exc)) from None
        servers_path = directory / SERVER_ACCOUNTS
        if servers_path.is_file():
            try:
                servers.extend(read_accounts(servers_path))
            except ValueError as exc:
                raise UsageError(str(exc)) from None
        meta_path = directory / "bench.json"
        metas.append(json.loads(meta_path.read_text()) if meta_path.is_file() else {})
    seen: set[tuple[str, str, str, int, int, int, int]] = set()
    for record in records:
        key = (
            record.transport,
            record.profile,
            record.agent,
            record.seed,
            record.trial,
            record.session,
            record.task_index,
        )
        if key in seen:
            raise UsageError(f"task {key} appears in two directories: the shards overlap (same --shard given twice?)")
        seen.add(key)
    seeds = {int(m["seed"]) for m in metas if isinstance(m.get("seed"), int)}
    if len(seeds) > 1:
        raise UsageError(f"the directories come from different seeds ({sorted(seeds)}): not shards of one matrix")
    if not records:
        raise UsageError("no task records in the directories given")
    missing = _missing_shards(directories, metas)
    if missing and not allow_partial:
        raise UsageError(
            f"shard(s) {', '.join(missing)} are missing: the merged report would cover part of the matrix; "
            "give every shard's directory, or pass --allow-partial to merge anyway (the report says it is incomplete)"
        )
    cells = Counter((r.profile, r.agent) for r in {(r.profile, r.agent, r.task_index): r for r in records}.values())
    return MergedResults(
        records=records,
        seed=seeds.pop() if seeds else 0,
        tasks_per_cell=max(cells.values()),
        wall_s=max((float(m.get("wall_s", 0.0)) for m in metas), default=0.0),
        jobs=sum(int(m.get("jobs", 0)) for m in metas),
        started_at=min((str(m["started_at"]) for m in metas if "started_at" in m), default=""),
        missing=tuple(missing),
        trials=max(r.trial for r in records) + 1,
        servers=tuple(servers),
        broken=tuple(
            BrokenSession(str(b["profile"]), str(b["agent"]), int(b["session"]), str(b["error"]))
            for m in metas
            for b in m.get("broken", [])
        ),
    )


def _missing_shards(directories: Sequence[Path], metas: Sequence[dict[str, Any]]) -> list[str]:
    """The shards I/N of the set the directories belong to that none of them holds."""
    given: dict[int, set[int]] = {}
    for directory, meta in zip(directories, metas, strict=True):
        shard = meta.get("shard")
        if not shard:
            continue
        try:
            index, count = parse_shard(str(shard))
        except UsageError:
            raise UsageError(f"{directory / 'bench.json'}: shard {shard!r} is not I/N") from None
        given.setdefault(count, set()).add(index)
    if len(given) > 1:
        raise UsageError(f"the directories come from different shard counts ({sorted(given)}): not one matrix")
    return [f"{i}/{count}" for count, indices in given.items() for i in range(count) if i not in indices]
