"""Profile validation: every problem at once, each naming file, rule, field and what is allowed."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mcpfault.analysis.summary import PROFILE_ORDER
from mcpfault.errors import ProfileError, UsageError
from mcpfault.faults import profile
from mcpfault.faults.catalog import CATALOG

ROOT = Path(__file__).resolve().parent.parent


def problems(text: str) -> list[str]:
    with pytest.raises(ProfileError) as caught:
        profile.loads(text, source="p.toml")
    return [str(p) for p in caught.value.problems]


def test_every_bundled_profile_is_valid() -> None:
    names = sorted(p.stem for p in (ROOT / "profiles").glob("*.toml"))
    # The profiles of the benchmark (gentle and stress), the HTTP profile it leaves out, the generic ones,
    # and the one for resources and prompts (config_audit's).
    assert names == sorted([*PROFILE_ORDER, "http", "drift_any", "stale_reads", "lost_writes", "resources"])
    for path in (ROOT / "profiles").glob("*.toml"):
        assert profile.load(path).name == path.stem


def test_all_problems_are_reported_together() -> None:
    found = problems(
        """
seed = "x"
colour = 1
[[faults]]
type = "laggy"
[[faults]]
name = "p"
type = "latency"
probability = 1.5
after = -1
limit = 2.5
delay_s = "slow"
jitter = 1
[[faults]]
type = "malformed"
modes = ["truncate", "explode"]
tools = ["get_[x", "bad name"]
[[faults]]
type = "error"
mode = "loud"
[[faults]]
name = "p"
type = "schema_drift"
"""
    )
    expected = [
        "p.toml: colour: unknown top-level key",
        "p.toml: seed: got 'x'; expected an integer",
        "p.toml: faults[0].type: unknown fault type 'laggy'; one of: " + ", ".join(CATALOG.names()),
        "p.toml: faults[1] ('p').probability: 1.5 is outside [0, 1]",
        "p.toml: faults[1] ('p').after: -1 is negative",
        "p.toml: faults[1] ('p').limit: got 2.5; expected a whole number",
        "p.toml: faults[1] ('p').delay_s: got string 'slow'; expected a number",
        "p.toml: faults[1] ('p').jitter: unknown key (did you mean 'jitter_s'?); type 'latency' takes: delay_s, jitter_s; every rule also takes: type, name, tools",
        "p.toml: faults[2].modes: item 1: got string 'explode'; expected one of 'truncate'",
        "p.toml: faults[2].tools: bad glob 'get_[x': unbalanced [ ]",
        "p.toml: faults[2].tools: bad glob 'bad name'",
        "p.toml: faults[3].mode: got string 'loud'; expected one of 'protocol', 'tool'",
        "p.toml: faults[4] ('p').type: set rename_args, rename_fields or both",
    ]
    for fragment in expected:
        assert any(fragment in line for line in found), (fragment, found)


def test_duplicate_rule_names() -> None:
    found = problems('[[faults]]\nname = "a"\ntype = "error"\n[[faults]]\nname = "a"\ntype = "latency"\n')
    assert found == ["p.toml: faults[1] ('a').name: 'a' is already the name of faults[0]; rule names must be unique"]


def test_not_toml_and_missing_file(tmp_path: Path) -> None:
    assert "is not valid TOML" in problems("[[faults]\n")[0]
    with pytest.raises(ProfileError) as caught:
        profile.load(tmp_path / "nope.toml")
    assert "does not exist" in str(caught.value)


def test_validate_command_exit_codes(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text('[[faults]]\ntype = "error"\nprobability = -0.5\n')
    ok = subprocess.run(
        [sys.executable, "-m", "mcpfault", "validate", *map(str, (ROOT / "profiles").glob("*.toml"))],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert ok.returncode == 0 and ok.stdout.count(": ok") == len(list((ROOT / "profiles").glob("*.toml")))
    failed = subprocess.run(
        [sys.executable, "-m", "mcpfault", "validate", str(bad), str(ROOT / "profiles/mixed.toml")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert failed.returncode == 1
    assert f"{bad}: faults[0].probability: -0.5 is outside [0, 1]" in failed.stderr
    assert "mixed.toml: ok" in failed.stdout


toml_scalars = st.one_of(
    st.integers(-5, 5),
    st.floats(-2, 2, allow_nan=False),
    st.booleans(),
    st.text(max_size=8),
    st.lists(st.text(max_size=5), max_size=3),
)
rule_tables = st.dictionaries(
    st.sampled_from(
        [
            "type",
            "name",
            "tools",
            "probability",
            "after",
            "limit",
            "mode",
            "modes",
            "delay_s",
            "jitter_s",
            "code",
            "message",
            "pick",
            "history",
            "rename_args",
            "notify",
            "zzz",
        ]
    ),
    st.one_of(toml_scalars, st.sampled_from(["error", "latency", "timeout", "stale", "malformed", "schema_drift"])),
    max_size=6,
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    document=st.fixed_dictionaries(
        {}, optional={"seed": toml_scalars, "name": toml_scalars, "faults": st.lists(rule_tables, max_size=4)}
    )
)
def test_random_documents_never_crash_validation(document: dict[str, Any]) -> None:
    try:
        profile.from_mapping(document, source="fuzz.toml")
    except ProfileError as exc:
        faults = document.get("faults")
        for problem in exc.problems:
            assert problem.file == "fuzz.toml" and problem.field and problem.message
            text = str(problem)
            if problem.rule is None:  # a top-level key: named as such
                assert problem.field in document or problem.field in ("name", "seed", "faults"), text
                assert text.startswith(f"fuzz.toml: {problem.field}: "), text
            else:  # a rule's key: the rule by index (and name), then the field
                assert isinstance(faults, list) and 0 <= problem.rule < len(faults), text
                assert text.startswith(f"fuzz.toml: faults[{problem.rule}]"), text
                rule = faults[problem.rule]
                keys = set(rule) if isinstance(rule, dict) else set()
                assert problem.field == "*" or problem.field.split(".")[0] in keys | {"type"}, text


def test_misspelt_rule_key_names_the_rule_keys_and_the_closest() -> None:
    (line,) = problems('[[faults]]\ntype = "error"\nprobablity = 0.5\n')
    assert "unknown key (did you mean 'probability'?)" in line
    assert "every rule also takes: type, name, tools, read_only, probability, after, limit" in line


def test_singular_fault_table_is_pointed_at_faults() -> None:
    (line,) = problems('[[fault]]\ntype = "error"\n')
    assert line.startswith("p.toml: fault: unknown top-level key (did you mean 'faults'?)")
    assert "rules go under [[faults]]" in line


def test_missing_relative_path_shows_the_working_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ProfileError, match=f"relative to the working directory {tmp_path}"):
        profile.load("missing.toml")
    with pytest.raises(UsageError, match=f"relative to the working directory {tmp_path}"):
        profile.resolve("missing.toml")


def test_bundled_names_resolve_from_any_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # no profiles/ here: names come from the package
    assert profile.resolve("error") == profile.BUNDLED_DIR / "error.toml"
    with pytest.raises(UsageError, match="unknown profile 'mixd' \\(did you mean 'mixed'\\?\\)"):
        profile.resolve("mixd")


def test_profiles_command_lists_every_bundled_profile_with_a_line() -> None:
    listed = subprocess.run(
        [sys.executable, "-m", "mcpfault", "profiles"], capture_output=True, text=True, timeout=60, check=True
    ).stdout.splitlines()
    assert [line.split()[0] for line in listed] == sorted(profile.bundled())
    assert all(len(line.split(None, 1)) == 2 for line in listed), listed  # every one has a description
    assert any(line.startswith("error ") and "Loud failures" in line for line in listed)


def test_proxy_and_validate_take_a_bundled_name(tmp_path: Path) -> None:
    checked = subprocess.run(
        [sys.executable, "-m", "mcpfault", "validate", "error", "mixed"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert checked.returncode == 0 and checked.stdout.count(": ok") == 2, checked.stderr


def test_a_fault_setting_named_like_a_generic_key_is_the_faults() -> None:
    """stall's duration_s is how long the server stops, not the rule's window (issue 12 and 13 both name it)."""
    loaded = profile.loads('[[faults]]\ntype = "stall"\nduration_s = 3\nstart_after_s = 1\n')
    rule = loaded.rules[0]
    assert rule.fault.duration_s == 3.0  # type: ignore[attr-defined]
    assert rule.duration_s is None and rule.start_after_s == 1.0
    windowed = profile.loads('[[faults]]\ntype = "error"\nstart_after_s = 30\nduration_s = 10\n').rules[0]
    assert windowed.duration_s == 10.0 and not windowed.in_window(41) and windowed.in_window(35)


def test_a_profile_read_again_is_parsed_once_and_a_changed_file_is_read_anew(tmp_path: Path) -> None:
    first, copy = tmp_path / "a.toml", tmp_path / "copy.toml"
    text = 'name = "a"\n\n[[faults]]\ntype = "error"\nmode = "tool"\nprobability = 0.5\n'
    first.write_text(text)
    copy.write_text(text)
    once = profile.load(first)
    assert profile.load(first) is once  # parsed once
    assert profile.load(copy).source == str(copy) and profile.load(copy).rules == once.rules
    first.write_text(text.replace("0.5", "0.2"))  # the same size, written at once: still read anew
    assert profile.load(first).rules[0].probability == 0.2
