"""The llm agent's options of ``run`` and ``bench``: its models, hints, turns, API, prices and recordings."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from mcpfault.errors import UsageError


def add_options(parser: argparse.ArgumentParser, *, bench: bool) -> None:
    group = parser.add_argument_group(
        "the llm agent", "a model solves the tasks from prompts (needs the llm extra and ANTHROPIC_API_KEY; see README)"
    )
    if bench:
        group.add_argument(
            "--models", "--model", dest="models", metavar="A,B", help="comma-separated models for the llm agent"
        )
    else:
        group.add_argument(
            "--model",
            metavar="NAME",
            help="the model of the llm agent: anthropic:MODEL (a bare name is Anthropic's) or openai:MODEL "
            "(default claude-sonnet-4-5)",
        )
    group.add_argument(
        "--reliability-hints",
        nargs="?",
        const="on",
        default="off",
        choices=["on", "off", "both"] if bench else ["on", "off"],
        help="tell the model the connection is unreliable and what as_of means"
        + ("; both: run every model with and without" if bench else ""),
    )
    group.add_argument("--max-turns", type=int, default=24, help="model turns per task (24)")
    group.add_argument(
        "--llm-base-url",
        metavar="URL",
        help="the model API's base URL (an OpenAI-compatible server for openai:MODEL: vLLM, Ollama, llama.cpp, "
        "LiteLLM, mcpfault fake-llm); default OPENAI_BASE_URL / ANTHROPIC_BASE_URL, else the provider's",
    )
    group.add_argument(
        "--llm-price", metavar="IN,OUT", help="USD per million input and output tokens, over the price table (0,0)"
    )
    group.add_argument("--record", type=Path, metavar="DIR", help="save every model exchange under DIR")
    group.add_argument("--replay", type=Path, metavar="DIR", help="answer from a recording: no API, no key")


def variants(args: argparse.Namespace, models_option: str | None) -> tuple[Any, ...]:
    """The llm agent's model variants (model x hints), checked before any work: SDK, key, directories."""
    from mcpfault.harness.agents.llm.agent import LLMConfig, check_config
    from mcpfault.harness.agents.llm.backend import DEFAULT_MODEL
    from mcpfault.harness.agents.llm.prices import parse_price

    models = [m.strip() for m in (models_option or DEFAULT_MODEL).split(",") if m.strip()]
    if not models:
        raise UsageError("--models: give at least one model name")
    _check_distinct(models)
    hints = {"off": (False,), "on": (True,), "both": (False, True)}[args.reliability_hints]
    price = parse_price(args.llm_price) if args.llm_price is not None else None
    variants = tuple(
        LLMConfig(
            model=m,
            hints=h,
            max_turns=args.max_turns,
            record_dir=args.record,
            replay_dir=args.replay,
            base_url=args.llm_base_url,
            price=price,
        )
        for m in models
        for h in hints
    )
    for variant in variants:
        check_config(variant)
    return variants


def _check_distinct(models: Sequence[str]) -> None:
    """Each model once: its records and report rows are labelled by it (``anthropic:x`` and ``x`` are one model)."""
    from mcpfault.harness.agents.llm.backend import provider_of

    seen: dict[tuple[str, str], str] = {}
    for model in models:
        key = provider_of(model)
        if key in seen:
            same = f"{seen[key]!r} and {model!r} are" if seen[key] != model else f"{model!r} is"
            raise UsageError(f"--models: {same} the same model twice; name each model once")
        seen[key] = model


def refuse_options(args: argparse.Namespace, models_option: str | None) -> None:
    given = [
        flag
        for flag, value in (
            ("--model(s)", models_option),
            ("--record", args.record),
            ("--replay", args.replay),
            ("--reliability-hints", args.reliability_hints != "off" or None),
            ("--llm-base-url", args.llm_base_url),
            ("--llm-price", args.llm_price),
        )
        if value is not None
    ]
    if given:
        raise UsageError(f"{', '.join(given)} apply to the llm agent only; add it with --agent(s) llm")


def write_manifest(args: argparse.Namespace, command: str, variants: Sequence[Any]) -> None:
    if args.record is None:
        return
    from mcpfault.harness.agents.llm.recording import write_manifest as write_recording_manifest

    fake = all(v.model.startswith("fake-") for v in variants)
    write_recording_manifest(
        args.record,
        {
            "command": command,
            "seed": args.seed,
            "models": sorted({v.model for v in variants}),
            "source": "the scripted fake model (fakemodel.py), not a real model" if fake else "the Anthropic API",
        },
    )
