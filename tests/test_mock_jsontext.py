"""The mock's indented JSON text is byte for byte what `json.dumps(indent=2)` writes."""

from __future__ import annotations

import json
from typing import Any

import pytest

from mcpfault.mock import World, resources
from mcpfault.mock.jsontext import indented


def _answers(world: World) -> list[Any]:
    """Every read answer of the world, a write of each kind, and the final state."""
    out: list[Any] = [world.list_sites()]
    for site in world.list_sites()["sites"]:
        out += [world.get_site(site["site_id"]), world.list_devices(site["site_id"])]
    for device_id in world.device_ids():
        out += [world.get_device_status(device_id), world.get_interface_metrics(device_id)]
        out.append(resources.device_config(world, device_id))
    device_id = world.device_ids()[0]
    out.append(world.set_maintenance(device_id, True, "fibre cut \u00e9 \u2028 \U0001f600"))
    out.append(world.open_incident(device_id, 'a "quoted"\tsummary\n\x01', "high", idempotency_key="k\u00e9"))
    out += [resources.list_resources(world), world.final_state()]
    return out


@pytest.mark.parametrize("seed", [0, 1, 7, 42])
@pytest.mark.parametrize("ensure_ascii", [True, False])
def test_matches_the_standard_library(seed: int, ensure_ascii: bool) -> None:
    for value in _answers(World.generate(seed)):
        assert indented(value, ensure_ascii=ensure_ascii) == json.dumps(value, indent=2, ensure_ascii=ensure_ascii)


@pytest.mark.parametrize("value", [{1: "int key"}, {"big": 2**70}, {"nested": [], "empty": {}}, [], "\u00e9"])
def test_what_orjson_refuses_or_escapes_differently_goes_to_the_standard_library(value: Any) -> None:
    for ensure_ascii in (True, False):
        assert indented(value, ensure_ascii=ensure_ascii) == json.dumps(value, indent=2, ensure_ascii=ensure_ascii)
