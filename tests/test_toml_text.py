"""Profiles and experiments given as mappings are written as TOML that reads back as given."""

from __future__ import annotations

import math
import tomllib

import pytest

from mcpfault.app.toml_text import toml_text


def test_a_profile_mapping_reads_back_as_given() -> None:
    rule: dict[str, object] = {"type": "schema_drift", "rename_fields": {"status": "state"}, "tools": ("a", "b")}
    document = {
        "name": "p",
        "seed": 3,
        "server": {"restart": "on-crash", "restart_delay_s": 0.5},
        "faults": [rule],
    }
    read = tomllib.loads(toml_text(document))
    assert read == {**document, "faults": [{**rule, "tools": ["a", "b"]}]}
    assert math.isnan(tomllib.loads(toml_text({"server": {"hold_s": math.nan}}))["server"]["hold_s"])


@pytest.mark.parametrize("value", [None, object(), {"nested": None}])
def test_what_toml_has_no_form_for_is_refused_not_written(value: object) -> None:
    with pytest.raises(ValueError, match="not TOML serializable"):
        toml_text({"name": "p", "x": value})
