"""`python -m mcpfault.mock` reads a proxy's plain server command without argparse, to the same values."""

from __future__ import annotations

import pathlib

import pytest

from mcpfault.mock.__main__ import _parser, _plain_options


def _by_argparse(argv: list[str]) -> dict[str, object]:
    args = _parser().parse_args(argv)
    return {
        "seed": args.seed,
        "state_path": args.state,
        "spans_path": args.spans,
        "otlp_endpoint": args.otlp_endpoint,
        "journal_path": args.journal,
    }


_DEFAULTS = {"seed": 0, "state_path": None, "spans_path": None, "otlp_endpoint": None, "journal_path": None}


@pytest.mark.parametrize(
    "argv",
    [
        [],
        ["--seed", "7"],
        ["--seed", "+3", "--state", "/tmp/s.json", "--journal", "j.jsonl", "--spans", "sp.jsonl"],
        ["--otlp-endpoint", "http://127.0.0.1:4318", "--seed", "1", "--seed", "2"],
        ["--state", ""],
        ["--seed", " 12 "],
    ],
)
def test_plain_commands_read_as_argparse_reads_them(argv: list[str]) -> None:
    plain = _plain_options(argv)
    assert plain is not None
    assert {**_DEFAULTS, **plain} == _by_argparse(argv)


@pytest.mark.parametrize(
    "argv",
    [
        ["--help"],
        ["--seed=3"],
        ["--se", "3"],  # argparse's abbreviation
        ["--seed", "-3"],  # a negative number: argparse's to tell from an option
        ["--seed", "three"],
        ["--state"],
        ["--state", "--seed"],
        ["--unknown", "x"],
        ["positional", "x"],
    ],
)
def test_anything_else_is_left_to_argparse(argv: list[str]) -> None:
    assert _plain_options(argv) is None


def test_paths_are_paths() -> None:
    assert _plain_options(["--state", "a/b.json"]) == {"state_path": pathlib.Path("a/b.json")}
