"""An agent's outputSchema check: the quick path never passes what jsonschema would refuse."""

from __future__ import annotations

import copy
from typing import Any

import jsonschema
import pytest

from mcpfault.harness.agents import schema
from mcpfault.harness.agents.schema import _surely_conforms
from mcpfault.mock import World
from mcpfault.mock.tools import TOOLS


def _results() -> list[tuple[str, Any]]:
    world = World.generate(3)
    site = world.list_sites()["sites"][0]["site_id"]
    device = world.device_ids()[0]
    return [
        ("list_sites", world.list_sites()),
        ("get_site", world.get_site(site)),
        ("list_devices", world.list_devices(site)),
        ("get_device_status", world.get_device_status(device)),
        ("get_interface_metrics", world.get_interface_metrics(device)),
        ("set_maintenance", world.set_maintenance(device, True, "work")),
        ("open_incident", world.open_incident(device, "down", "high")),
    ]


def _variants(value: Any) -> list[Any]:
    """``value`` and versions of it broken one way each: a field dropped, retyped, added, or emptied."""
    out = [value]
    if isinstance(value, dict):
        for key in value:
            dropped = {k: v for k, v in value.items() if k != key}
            out += [dropped, {**value, key: None}, {**value, key: "x"}, {**value, key: 1.0}, {**value, key: True}]
            out += [{**value, key: v} for v in _variants(value[key])[1:4]]
        out.append({**value, "unexpected": 1})
    if isinstance(value, list) and value:
        out += [[*value, "x"], [None], [1]]
        out += [[v, *value[1:]] for v in _variants(value[0])[1:4]]
    return out


@pytest.mark.parametrize(("tool", "result"), _results())
def test_the_quick_path_agrees_with_jsonschema(tool: str, result: Any) -> None:
    output_schema = TOOLS[tool].output_schema
    assert _surely_conforms(result, output_schema)  # the mock's own answers take the quick path
    checker = jsonschema.Draft202012Validator(output_schema)
    for variant in _variants(copy.deepcopy(result)):
        if _surely_conforms(variant, output_schema):
            assert checker.is_valid(variant), variant
        assert (schema.validate(variant, output_schema) is None) == checker.is_valid(variant)


@pytest.mark.parametrize(
    ("instance", "subschema"),
    [
        (1.0, {"type": "integer"}),  # jsonschema's integral float
        (True, {"type": "integer"}),
        (1, {"enum": [1.0]}),
        ("a", {"type": "string", "minLength": 2}),  # a keyword the quick path does not read
        ({"a": 1}, {"$schema": "http://json-schema.org/draft-07/schema#", "type": "object"}),
        ([1, "x"], {"type": "array", "items": [{"type": "integer"}]}),
        ({"a": 1}, {"type": "object", "additionalProperties": False}),
        ({"a": 1}, {"$ref": "#/$defs/x", "$defs": {"x": {}}}),
    ],
)
def test_what_the_quick_path_does_not_know_goes_to_jsonschema(instance: Any, subschema: dict[str, Any]) -> None:
    assert not _surely_conforms(instance, subschema)
