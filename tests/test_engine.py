"""The engine: matching, after, limit, first-wins, persistence, and determinism."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from mcpfault.faults import profile
from mcpfault.faults.base import Call
from mcpfault.faults.engine import Engine
from mcpfault.protocol import jsonrpc

MIXED = (profile.load("profiles/mixed.toml"),)


def call(tool: str, request_id: int = 1, method: str = "tools/call", **arguments: Any) -> Call:
    params = {"name": tool, "arguments": arguments} if method == "tools/call" else {}
    return Call.from_body({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params})


def engine(text: str) -> Engine:
    return Engine(profile.loads(text))


def modes(eng: Engine, calls: list[Call]) -> list[str | None]:
    out = []
    for c in calls:
        decision = eng.decide(c)
        out.append(decision.applied[0].rule if decision.applied else None)
    return out


def test_after_and_limit() -> None:
    eng = engine('[[faults]]\nname = "e"\ntype = "error"\nafter = 2\nlimit = 3\n')
    assert modes(eng, [call("t", i) for i in range(8)]) == [None, None, "e", "e", "e", None, None, None]


def test_tools_globs_select_calls_and_other_methods_pass() -> None:
    eng = engine('[[faults]]\nname = "e"\ntype = "error"\ntools = ["get_*", "list_[ds]*"]\n')
    got = modes(eng, [call("get_x"), call("set_x"), call("list_devices"), call("list_sites"), call("list_zones")])
    assert got == ["e", None, "e", "e", None]
    assert not eng.decide(call("", method="tools/list")).applied
    assert not eng.decide(call("", method="resources/read")).applied


def test_first_rule_that_fires_wins() -> None:
    eng = engine('[[faults]]\nname = "a"\ntype = "error"\nlimit = 1\n[[faults]]\nname = "b"\ntype = "latency"\n')
    assert modes(eng, [call("t"), call("t"), call("t")]) == ["a", "b", "b"]


def test_probability_is_honoured_roughly() -> None:
    eng = engine('seed = 11\n[[faults]]\nname = "e"\ntype = "error"\nprobability = 0.25\n')
    fired = sum(1 for m in modes(eng, [call("t", i) for i in range(4000)]) if m)
    assert 900 < fired < 1100


def test_stale_fires_only_once_something_is_cached() -> None:
    eng = engine('[[faults]]\nname = "s"\ntype = "stale"\n')
    first = call("get", 1, x=1)
    assert not eng.decide(first).applied  # nothing cached yet
    answer = {"jsonrpc": "2.0", "id": 1, "result": {"structuredContent": {"v": 1}}}
    eng.observe_response(first, jsonrpc.encode(answer), answer)
    second = eng.decide(call("get", 2, x=1))
    assert second.reply is not None and second.reply["id"] == 2 and second.reply["result"] == answer["result"]
    assert not eng.decide(call("get", 3, x=2)).applied  # other arguments, other cache entry


def test_drift_is_persistent_and_combines_with_another_fault() -> None:
    eng = engine(
        '[[faults]]\nname = "d"\ntype = "schema_drift"\nafter = 1\nrename_fields = { a = "b" }\n'
        '[[faults]]\nname = "slow"\ntype = "latency"\nafter = 2\n'
    )
    first, second, third = (eng.decide(call("t", i)) for i in range(3))
    assert not first.applied
    assert [a.rule for a in second.applied] == ["d"]
    assert [a.rule for a in third.applied] == ["d", "slow"]
    listing = eng.decide(call("", method="tools/list"))
    assert [(a.rule, a.mode) for a in listing.applied] == [("d", "rewrite_list")]


def test_handshake_advertises_list_changed_only_with_notify() -> None:
    quiet = engine('[[faults]]\ntype = "schema_drift"\nrename_args = { a = "b" }\n')
    loud = engine('[[faults]]\ntype = "schema_drift"\nrename_args = { a = "b" }\nnotify = true\n')
    init = Call.from_body({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {}})
    assert not quiet.decide(init).applied
    assert [a.mode for a in loud.decide(init).applied] == ["advertise"]


def test_baseline_engine_cares_about_nothing() -> None:
    eng = Engine(profile.load("profiles/baseline.toml"))
    assert not eng.cares_about("tools/call") and not eng.cares_about("initialize")


request_sequences = st.lists(
    st.tuples(st.sampled_from(["get_site", "list_devices", "set_maintenance", "open_incident"]), st.integers(0, 3)),
    max_size=60,
)


def fingerprint(eng: Engine, sequence: list[tuple[str, int]]) -> list[Any]:
    out: list[Any] = []
    for index, (tool, arg) in enumerate(sequence):
        c = call(tool, index, x=arg)
        decision = eng.decide(c)
        delivered = decision.deliver(jsonrpc.encode({"jsonrpc": "2.0", "id": index, "result": {"x": arg}}))
        out.append(([(a.rule, a.mode) for a in decision.applied], decision.reply, delivered))
        answer = {"jsonrpc": "2.0", "id": index, "result": {"structuredContent": {"x": arg, "n": index}}}
        eng.observe_response(c, jsonrpc.encode(answer), answer)
    return out


@settings(max_examples=60, deadline=None)
@given(sequence=request_sequences, seed=st.integers(0, 2**31))
def test_same_profile_seed_and_requests_give_the_same_faults(sequence: list[tuple[str, int]], seed: int) -> None:
    loaded = MIXED[0]
    reseeded = profile.Profile(loaded.name, seed, loaded.rules, loaded.source)
    assert fingerprint(Engine(reseeded), sequence) == fingerprint(Engine(reseeded), sequence)


def test_different_seeds_give_different_faults() -> None:
    sequence = [("get_site", i % 4) for i in range(200)]
    loaded = MIXED[0]
    a = fingerprint(Engine(profile.Profile("m", 1, loaded.rules)), sequence)
    b = fingerprint(Engine(profile.Profile("m", 2, loaded.rules)), sequence)
    assert [x[0] for x in a] != [x[0] for x in b]


def test_a_time_window_bounds_when_a_rule_is_in_force() -> None:
    eng = engine('[[faults]]\nname = "w"\ntype = "error"\nstart_after_s = 30\nduration_s = 10\n')
    at = [0.0, 29.99, 30.0, 35.0, 39.99, 40.0, 100.0]
    got = [bool(eng.decide(call("t", i), elapsed_s=s).applied) for i, s in enumerate(at)]
    assert got == [False, False, True, True, True, False, False]
    # Outside its window the rule neither counts nor draws: `after` counts only calls inside it.
    eng = engine('[[faults]]\nname = "w"\ntype = "error"\nstart_after_s = 5\nafter = 1\n')
    assert [bool(eng.decide(call("t", i), elapsed_s=s).applied) for i, s in enumerate([1, 2, 6, 7])] == [
        False,
        False,
        False,
        True,
    ]
    assert eng.counters() == [("w", 2, 1)]


def test_a_window_without_a_start_or_an_end() -> None:
    ends = engine('[[faults]]\nname = "w"\ntype = "error"\nduration_s = 2\n')
    assert [bool(ends.decide(call("t", i), elapsed_s=s).applied) for i, s in enumerate([0, 1.9, 2])] == [
        True,
        True,
        False,
    ]
    starts = engine('[[faults]]\nname = "w"\ntype = "error"\nstart_after_s = 2\n')
    assert [bool(starts.decide(call("t", i), elapsed_s=s).applied) for i, s in enumerate([0, 2, 1e6])] == [
        False,
        True,
        True,
    ]


def test_window_keys_are_validated_with_the_other_generic_keys() -> None:
    import pytest

    from mcpfault.errors import ProfileError

    text = '[[faults]]\ntype = "error"\nstart_after_s = -1\nduration_s = 0\n[[faults]]\ntype = "error"\nduration_s = "10s"\n'
    with pytest.raises(ProfileError) as caught:
        profile.loads(text, source="w.toml")
    assert [str(p) for p in caught.value.problems] == [
        "w.toml: faults[0].start_after_s: -1 is not a finite number of seconds >= 0",
        "w.toml: faults[0].duration_s: 0 is not a finite number of seconds > 0",
        "w.toml: faults[1].duration_s: got '10s'; expected seconds as a number > 0, e.g. 30 or 2.5",
    ]


def test_a_sessions_share_picks_sessions_by_a_seeded_hash_of_their_id() -> None:
    from mcpfault.faults.engine import session_share
    from mcpfault.proxy.http.sessions import Sessions

    loaded = profile.loads('seed = 9\n[[faults]]\nname = "e"\ntype = "error"\nsessions = 0.3\n')
    sessions = Sessions(loaded, events=None, observers_for=lambda _sid: [], propagate=False)
    line = jsonrpc.encode({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "t"}})
    hit = [
        sid
        for sid in (f"session-{i}" for i in range(1000))
        if sessions.session(sid).core.from_client(line)[0].to.value == "client"
    ]
    assert 250 < len(hit) < 350
    assert hit == [f"session-{i}" for i in range(1000) if session_share(9, f"session-{i}") < 0.3]  # the same every run
    assert sessions.exchange_core().from_client(line)[0].to.value == "server"  # outside any session: outside it
    with_other_seed = [i for i in range(1000) if session_share(10, f"session-{i}") < 0.3]
    assert with_other_seed != [int(sid.split("-")[1]) for sid in hit]
