from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ludic_core.errors import DataError
from ludic_core.inference import InferenceSpec, ReturnSpec
from ludic_core.protocols import SingleAgentProtocol
from ludic_core.serialization import rollout_from_dict, rollout_from_json, rollout_to_dict, rollout_to_json
from ludic_core.testing import GuessNumberEnv, ScriptedAgent, ScriptedChatClient
from ludic_core.types import ToolResult


async def make_rollout():  # type: ignore[no-untyped-def]
    client = ScriptedChatClient(["CALL peek {}", "bad ✓", "1", "2", "3", "4", "5"], cycle=True)
    agent = ScriptedAgent(
        client, external_tools={"peek"}, inference=InferenceSpec(return_=ReturnSpec.for_rl())
    )

    def handler(calls):  # type: ignore[no-untyped-def]
        return [ToolResult(tool_call_id=c.id, tool_name=c.name, content="résumé") for c in calls]

    def parser(text: str):  # type: ignore[no-untyped-def]
        from ludic_core.parsing import ParseResult

        return (
            ParseResult(action=text) if text.isdigit() else ParseResult(action=None, reward=-1, obs="digits")
        )

    agent.parser = parser
    [rollout] = await SingleAgentProtocol(agent, external_tool_handler=handler).run(
        env=GuessNumberEnv(), max_steps=4, env_seed=1, sampling_seed=2
    )
    return rollout


async def test_rollout_json_round_trip_is_exact() -> None:
    rollout = await make_rollout()
    kinds = {(s.kind, getattr(s, "action_target", None)) for s in rollout.steps}
    assert ("agent", "external") in kinds and ("env", None) in kinds
    assert any(s.truncated for s in rollout.steps) or rollout.env_steps[-1].terminated
    line = rollout_to_json(rollout)
    assert "\n" not in line
    restored = rollout_from_json(line)
    assert restored == rollout
    assert rollout_to_dict(restored) == json.loads(line)


async def test_failed_rollout_round_trips() -> None:
    [rollout] = await SingleAgentProtocol(
        ScriptedAgent(ScriptedChatClient(["CALL x {}"]), external_tools={"x"})
    ).run(env=GuessNumberEnv(), max_steps=2)
    assert rollout.failure is not None
    assert rollout_from_json(rollout_to_json(rollout)) == rollout


def test_bad_rollout_json_is_a_clear_error() -> None:
    with pytest.raises(DataError, match="invalid rollout JSON"):
        rollout_from_json("{nope")
    with pytest.raises(DataError, match="no 'steps'"):
        rollout_from_dict({"id": "r"})
    with pytest.raises(DataError, match="schema_version"):
        rollout_from_dict({"id": "r", "steps": [], "schema_version": 7})
    with pytest.raises(DataError, match="kind"):
        rollout_from_dict({"id": "r", "steps": [{"kind": "weird"}]})
    with pytest.raises(DataError, match="unknown fields"):
        rollout_from_dict(
            {
                "id": "r",
                "steps": [
                    {
                        "kind": "agent",
                        "trace": {"prompt_token_ids": [1], "completion_token_ids": []},
                        "zzz": 1,
                    }
                ],
            }
        )


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**40), 2**40)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=5), children, max_size=3)
    ),
    max_leaves=8,
)


@settings(max_examples=60, deadline=None)
@given(meta=st.dictionaries(st.text(max_size=8), json_values, max_size=4))
def test_rollout_meta_with_arbitrary_json_round_trips(meta: dict[str, object]) -> None:
    import asyncio

    rollout = asyncio.run(make_rollout())
    rollout.meta.update(meta)
    assert rollout_from_json(rollout_to_json(rollout)) == rollout
