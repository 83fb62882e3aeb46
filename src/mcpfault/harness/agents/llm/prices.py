"""What model calls cost: the one price table, in US dollars per million tokens (input, output).

Prices are Anthropic's and OpenAI's published list prices for standard (non-batch, uncached) use as
of late 2025; check https://www.anthropic.com/pricing and https://openai.com/api/pricing before
trusting a figure, and edit this table (the only place prices live) when they change. ``--llm-price
IN,OUT`` overrides it for a run (a local model: ``--llm-price 0,0``). A ``provider:`` prefix
(``openai:gpt-4o``) is not part of the name looked up. A model is matched by the longest key its name starts with,
so dated snapshots ("claude-sonnet-4-5-20250929") find their family. An unknown model gets no cost
estimate (shown as ``?``), never a made-up one.

The ``fake-`` models (the scripted fake Messages API, see ``fakemodel``) are priced like the default
model so offline examples show what such a run would cost; their token counts are estimates
(four characters a token), not a tokenizer's.
"""

from __future__ import annotations

import math
from typing import Final

from mcpfault.errors import UsageError
from mcpfault.harness.agents.llm.backend import DEFAULT_MODEL, provider_of

PER_MILLION_USD: Final[dict[str, tuple[float, float]]] = {
    "claude-opus-4-5": (5.00, 25.00),
    "claude-opus-4-1": (15.00, 75.00),
    "claude-opus-4": (15.00, 75.00),
    "claude-sonnet-4-5": (3.00, 15.00),
    "claude-sonnet-4": (3.00, 15.00),
    "claude-3-7-sonnet": (3.00, 15.00),
    "claude-haiku-4-5": (1.00, 5.00),
    "claude-3-5-haiku": (0.80, 4.00),
    "claude-3-haiku": (0.25, 1.25),
    "gpt-4o": (2.50, 10.00),
    "gpt-4o-mini": (0.15, 0.60),
    "gpt-4.1": (2.00, 8.00),
    "gpt-4.1-mini": (0.40, 1.60),
    "gpt-4.1-nano": (0.10, 0.40),
}
FAKE_PREFIX: Final = "fake-"


def price_of(model: str) -> tuple[float, float] | None:
    """(input, output) USD per million tokens, or None for a model not in the table."""
    model = provider_of(model)[1]
    if model.startswith(FAKE_PREFIX):
        model = DEFAULT_MODEL
    matches = [key for key in PER_MILLION_USD if model.startswith(key)]
    return PER_MILLION_USD[max(matches, key=len)] if matches else None


def cost_usd(
    model: str, input_tokens: int, output_tokens: int, price: tuple[float, float] | None = None
) -> float | None:
    """Estimated cost of these tokens on ``model`` (at ``price`` when given), or None when its price is unknown."""
    price = price if price is not None else price_of(model)
    if price is None:
        return None
    return (input_tokens * price[0] + output_tokens * price[1]) / 1_000_000


def parse_price(option: str) -> tuple[float, float]:
    """``--llm-price IN,OUT``: USD per million input and output tokens, each >= 0."""
    parts = option.split(",")
    try:
        values = tuple(float(p) for p in parts)
    except ValueError:
        values = ()
    if len(values) != 2 or any(not math.isfinite(v) or v < 0 for v in values):
        raise UsageError(f"--llm-price {option!r}: give IN,OUT in USD per million tokens, e.g. 2.5,10 (0,0: free)")
    return values[0], values[1]
