"""The mock world: deterministic generation, revisions, and the two write semantics."""

from __future__ import annotations

import json
import random
from typing import Annotated, Literal, NotRequired, Required, TypedDict

import pytest

from mcpfault.mock import World
from mcpfault.mock.schema import argument_problems, json_schema
from mcpfault.mock.world import (
    INITIAL_REVISION,
    DeviceListResult,
    DeviceStatusResult,
    IncidentResult,
    InterfaceMetricsResult,
    InvalidArgumentError,
    SetMaintenanceResult,
    SiteListResult,
    SiteResult,
    UnknownIdError,
)


def _some_device(world: World) -> str:
    return world.device_ids()[0]


def test_same_seed_gives_identical_snapshot() -> None:
    assert World.generate(7).snapshot() == World.generate(7).snapshot()


def test_generation_ignores_and_keeps_the_global_rng() -> None:
    random.seed(1)
    before = random.random()
    random.seed(1)
    first = World.generate(3).snapshot()
    assert random.random() == before  # the global RNG was not consumed
    random.seed(99)
    assert World.generate(3).snapshot() == first


def test_different_seeds_differ() -> None:
    snapshots = [json.dumps(World.generate(seed).snapshot(), sort_keys=True) for seed in range(20)]
    assert len(set(snapshots)) == 20


@pytest.mark.parametrize("seed", range(30))
def test_shape_of_generated_worlds(seed: int) -> None:
    world = World.generate(seed)
    assert 4 <= len(world.site_ids()) <= 6
    for site_id in world.site_ids():
        devices = world.device_ids(site_id)
        assert 3 <= len(devices) <= 6
        for device_id in devices:
            device = world.device(device_id)
            assert device.site_id == site_id
            assert 2 <= len(device.interfaces) <= 4
            if device.status == "down":
                assert all(i.oper_status == "down" for i in device.interfaces)
            if device.status == "ok":
                assert all(i.oper_status == "up" and i.errors_per_min <= 5 for i in device.interfaces)
            for interface in device.interfaces:
                assert 0.0 <= interface.utilization_pct <= 100.0
                assert (interface.latency_ms is None) == (interface.oper_status == "down")
    assert len(set(world.device_ids())) == len(world.device_ids())
    assert world.revision == INITIAL_REVISION
    assert world.writes == 0
    json.dumps(world.snapshot())  # JSON-able


def test_every_read_carries_as_of() -> None:
    world = World.generate(7)
    site_id = world.site_ids()[0]
    device_id = _some_device(world)
    answers = [
        world.list_sites(),
        world.get_site(site_id),
        world.list_devices(site_id),
        world.get_device_status(device_id),
        world.get_interface_metrics(device_id),
    ]
    assert all(answer["as_of"] == world.revision for answer in answers)


def test_reads_agree_with_accessors() -> None:
    world = World.generate(11)
    for site in world.list_sites()["sites"]:
        listed = world.list_devices(site["site_id"])["devices"]
        assert [d["device_id"] for d in listed] == world.device_ids(site["site_id"])
        counts = world.get_site(site["site_id"])["status_counts"]
        assert counts["ok"] + counts["degraded"] + counts["down"] == site["device_count"] == len(listed)
        for d in listed:
            status = world.get_device_status(d["device_id"])
            metrics = world.get_interface_metrics(d["device_id"])
            assert status["status"] == d["status"] == world.device(d["device_id"]).status
            assert status["interfaces_total"] == len(metrics["interfaces"])
            assert status["interfaces_up"] == sum(i["oper_status"] == "up" for i in metrics["interfaces"])


def test_set_maintenance_is_idempotent_and_bumps_revision_only_on_change() -> None:
    world = World.generate(7)
    device_id = next(d for d in world.device_ids() if not world.maintenance(d).enabled)
    start = world.revision

    first = world.set_maintenance(device_id, True, "fiber work")
    assert first["changed"] is True
    assert first["as_of"] == world.revision == start + 1
    assert world.maintenance(device_id).enabled is True
    assert world.maintenance(device_id).since_revision == start + 1

    again = world.set_maintenance(device_id, True, "fiber work")
    assert again["changed"] is False
    assert world.revision == start + 1
    assert again == {**first, "changed": False}

    # A different reason is a different state.
    assert world.set_maintenance(device_id, True, "fiber work, extended")["changed"] is True
    assert world.revision == start + 2

    assert world.set_maintenance(device_id, False, "done")["changed"] is True
    assert world.set_maintenance(device_id, False, "done, really")["changed"] is False
    assert world.revision == start + 3
    assert world.maintenance(device_id).reason is None

    state = world.final_state()
    assert state["writes"] == 5
    assert state["state_changes"] == 3
    assert state["revision"] == start + 3
    assert state["maintenance"][device_id] == {"enabled": False, "reason": None, "since_revision": start + 3}


def test_open_incident_without_key_duplicates() -> None:
    world = World.generate(7)
    device_id = _some_device(world)
    before = len(world.incidents())
    a = world.open_incident(device_id, "link down", "high")
    b = world.open_incident(device_id, "link down", "high")
    assert a["created"] is b["created"] is True
    assert a["incident_id"] != b["incident_id"]
    assert b["as_of"] == a["as_of"] + 1 == world.revision
    assert len(world.incidents()) == before + 2
    assert [i.incident_id for i in world.incidents(device_id)][-2:] == [a["incident_id"], b["incident_id"]]
    assert world.get_device_status(device_id)["open_incident_ids"][-2:] == [a["incident_id"], b["incident_id"]]


def test_open_incident_with_key_deduplicates() -> None:
    world = World.generate(7)
    device_id = _some_device(world)
    before = len(world.incidents())
    first = world.open_incident(device_id, "link down", "high", idempotency_key="k-1")
    revision = world.revision
    repeat = world.open_incident(device_id, "link down", "high", idempotency_key="k-1")
    assert repeat == {**first, "created": False}
    assert world.revision == revision
    # The key wins even if the other arguments changed: the first incident is the answer.
    other = world.open_incident(world.device_ids()[1], "something else", "low", idempotency_key="k-1")
    assert other["incident_id"] == first["incident_id"] and other["created"] is False
    fresh = world.open_incident(device_id, "link down", "high", idempotency_key="k-2")
    assert fresh["created"] is True and fresh["incident_id"] != first["incident_id"]
    assert len(world.incidents()) == before + 2

    state = world.final_state()
    assert state["writes"] == 4 and state["state_changes"] == 2
    keyed = [i for i in state["incidents"] if i["idempotency_key"] is not None]
    assert [(i["incident_id"], i["idempotency_key"]) for i in keyed] == [
        (first["incident_id"], "k-1"),
        (fresh["incident_id"], "k-2"),
    ]
    assert [r["changed"] for r in state["write_log"]] == [True, False, False, True]


def test_revision_is_monotonic_over_random_writes() -> None:
    world = World.generate(5)
    rng = random.Random(0)
    devices = world.device_ids()
    last = world.revision
    for n in range(200):
        device_id = rng.choice(devices)
        if rng.random() < 0.5:
            answer = world.set_maintenance(device_id, rng.random() < 0.5, rng.choice(["a", "b"]))
            changed = answer["changed"]
        else:
            key = rng.choice([None, "x", "y", f"k{n}"])
            answer_i = world.open_incident(device_id, "s", "low", idempotency_key=key)
            changed = answer_i["created"]
        assert world.revision == last + (1 if changed else 0)
        last = world.revision
    state = world.final_state()
    assert state["writes"] == 200
    assert state["revision"] == INITIAL_REVISION + state["state_changes"]
    revisions = [r["revision"] for r in state["write_log"]]
    assert revisions == sorted(revisions)


def test_unknown_ids_name_the_id_and_the_way_out() -> None:
    world = World.generate(7)
    with pytest.raises(UnknownIdError, match=r"'nowhere'.*list_sites"):
        world.get_site("nowhere")
    with pytest.raises(UnknownIdError, match="list_sites"):
        world.list_devices("nowhere")
    for call in (
        lambda: world.get_device_status("nope-core01"),
        lambda: world.get_interface_metrics("nope-core01"),
        lambda: world.set_maintenance("nope-core01", True, "x"),
        lambda: world.open_incident("nope-core01", "x", "low"),
    ):
        with pytest.raises(UnknownIdError, match=r"'nope-core01'.*list_devices"):
            call()
    assert world.revision == INITIAL_REVISION and world.writes == 0


def test_invalid_write_arguments_change_nothing() -> None:
    world = World.generate(7)
    device_id = _some_device(world)
    with pytest.raises(InvalidArgumentError):
        world.open_incident(device_id, "x", "apocalyptic")
    with pytest.raises(InvalidArgumentError):
        world.open_incident(device_id, "   ", "low")
    with pytest.raises(InvalidArgumentError):
        world.open_incident(device_id, "x", "low", idempotency_key="")
    with pytest.raises(InvalidArgumentError):
        world.set_maintenance(device_id, True, "")
    assert world.revision == INITIAL_REVISION and world.writes == 0


def test_final_state_round_trips_through_json() -> None:
    world = World.generate(7)
    world.open_incident(_some_device(world), "x", "low", idempotency_key="k")
    state = world.final_state()
    assert json.loads(json.dumps(state)) == state
    assert set(state) == {"seed", "revision", "writes", "state_changes", "incidents", "maintenance", "write_log"}
    assert set(state["maintenance"]) == set(world.device_ids())


# ---- the result TypedDicts are the one definition of each shape: schemas derived from them ----------


class _Inner(TypedDict):
    level: Literal[1, 2, 3]


class _Outer(TypedDict):
    name: Annotated[str, "The name."]
    inner: list[_Inner]
    maybe: float | None
    either: str | _Inner
    optional: NotRequired[Annotated[bool, "Optional flag."]]


class _Partial(TypedDict, total=False):
    a: int
    b: Required[str]


def test_json_schema_from_typed_dicts() -> None:
    assert json_schema(_Outer) == {
        "type": "object",
        "properties": {
            "name": {"type": "string", "description": "The name."},
            "inner": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {"level": {"type": "integer", "enum": [1, 2, 3]}},
                    "required": ["level"],
                    "additionalProperties": False,
                },
            },
            "maybe": {"type": ["number", "null"]},
            "either": {"anyOf": [{"type": "string"}, json_schema(_Inner)]},
            "optional": {"type": "boolean", "description": "Optional flag."},
        },
        "required": ["name", "inner", "maybe", "either"],
        "additionalProperties": False,
    }
    assert json_schema(_Partial)["required"] == ["b"]
    with pytest.raises(TypeError, match="no JSON Schema"):
        json_schema(dict[str, int])


def test_result_schemas_describe_what_the_world_answers() -> None:
    """Each read answer of several worlds validates against the schema derived from its TypedDict."""
    import jsonschema

    for seed in range(5):
        world = World.generate(seed)
        answers: list[tuple[object, object]] = [(world.list_sites(), SiteListResult)]
        for site_id in world.site_ids():
            answers += [(world.get_site(site_id), SiteResult), (world.list_devices(site_id), DeviceListResult)]
        for device_id in world.device_ids():
            answers += [
                (world.get_device_status(device_id), DeviceStatusResult),
                (world.get_interface_metrics(device_id), InterfaceMetricsResult),
            ]
        device_id = _some_device(world)
        answers += [
            (world.set_maintenance(device_id, True, "r"), SetMaintenanceResult),
            (world.open_incident(device_id, "s", "low", "k"), IncidentResult),
            (world.open_incident(device_id, "s", "low", "k"), IncidentResult),
        ]
        for answer, shape in answers:
            jsonschema.validate(answer, json_schema(shape), cls=jsonschema.Draft202012Validator)


def test_argument_problems_name_every_problem() -> None:
    schema = json_schema(_Outer)
    assert argument_problems(schema, {"name": "x", "inner": [], "maybe": None, "either": "e"}) == []
    problems = argument_problems(schema, {"nmae": "x", "inner": {}, "maybe": True, "either": "e", "optional": 1})
    assert problems == [
        "unexpected argument 'nmae' (accepted: name, inner, maybe, either, optional)",
        "missing required argument 'name'",
        "argument 'inner' must be an array, got object {}",
        "argument 'maybe' must be a number or null, got boolean true",
        "argument 'optional' must be a boolean (true or false), got integer 1",
    ]
