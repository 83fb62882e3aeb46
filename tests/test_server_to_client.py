"""``direction = "server_to_client"`` rules: faults on the client's answer to a server's request
(sampling/createMessage here), end to end with the SDK's client and server (2025-11-25, stdio)."""

from __future__ import annotations

import time
from pathlib import Path

import anyio
import pytest

from mcpfault.errors import ProfileError
from mcpfault.faults import profile
from mcpfault.proxy.events import read_events
from tests.conftest import write_profile
from tests.sdk_support import SamplingModel
from tests.test_interop import SDK_SERVER, connect, proxied


@pytest.mark.parametrize(
    ("rule", "field", "says"),
    [
        ('type = "timeout"\ndirection = "server_to_client"', "methods", "names the server requests"),
        ('type = "timeout"\ndirection = "server_to_client"\nmethods = ["tools/call"]', "methods", "a client request"),
        ('type = "timeout"\nmethods = ["sampling/createMessage"]', "methods", "set direction"),
        ('type = "stale"\ndirection = "server_to_client"\nmethods = ["roots/list"]', "methods", "cannot act on"),
        ('type = "error"\ndirection = "sideways"', "direction", "server_to_client"),
    ],
)
def test_validate_names_a_rule_of_the_wrong_direction(rule: str, field: str, says: str) -> None:
    with pytest.raises(ProfileError) as caught:
        profile.loads(f"[[faults]]\n{rule}\n")
    found = [f"{p.field}: {p.message}" for p in caught.value.problems]
    assert any(p.startswith(f"{field}:") and says in p for p in found), found


RULE = """
name = "s2c"

[[faults]]
name = "answer-fault"
direction = "server_to_client"
methods = ["sampling/createMessage"]
{settings}
"""


async def _ask(tmp_path: Path, settings: str) -> tuple[str, float, SamplingModel, list[dict[str, object]]]:
    events = tmp_path / "events.jsonl"
    params = proxied(write_profile(tmp_path, RULE.replace("{settings}", settings)), events, [*SDK_SERVER])
    model = SamplingModel()
    with anyio.fail_after(30):
        async with connect(params, "legacy", tmp_path / "stderr.txt", sampling_callback=model) as client:
            started = time.monotonic()
            result = await client.call_tool("ask_model", {"question": "ping?"})
            took = time.monotonic() - started
    text = result.content[0].text  # type: ignore[union-attr]
    return text, took, model, [e for e in read_events(events) if e["method"] == "sampling/createMessage"]


@pytest.mark.slow
@pytest.mark.anyio
async def test_a_dropped_sampling_answer_looks_to_the_server_like_a_lost_client(tmp_path: Path) -> None:
    text, took, model, events = await _ask(tmp_path, 'type = "timeout"')
    assert len(model.requests) == 1  # the client's model did answer...
    assert text == "no answer from the client's model within 2 s" and took >= 2  # ...the server never heard it
    assert [(e["rule"], e["fault_mode"], e["client_received"]) for e in events] == [("answer-fault", "drop", "nothing")]


@pytest.mark.slow
@pytest.mark.anyio
async def test_an_error_replaces_the_clients_answer(tmp_path: Path) -> None:
    text, _, model, events = await _ask(tmp_path, 'type = "error"\nmessage = "model overloaded"')
    assert len(model.requests) == 1
    assert text == "the client refused: model overloaded"
    assert [(e["fault_mode"], e["client_received"]) for e in events] == [("protocol", "error")]


@pytest.mark.slow
@pytest.mark.anyio
async def test_a_late_answer_still_arrives(tmp_path: Path) -> None:
    text, took, _, events = await _ask(tmp_path, 'type = "latency"\ndelay_s = 0.5')
    assert text == f"the model said: {SamplingModel.ANSWER}" and took >= 0.5
    assert [(e["fault_mode"], e["client_received"], e["delay_s"]) for e in events] == [("delay", "response", 0.5)]
