"""examples/tool_use.py with a tiny random model: the whole run (scripted warm start, GRPO through
``ToolAgent``, both evaluations) in seconds, and the pieces its numbers rest on: the teacher and the
per-episode report (the calculator's own tests are ludic-agents'). Whether the agent learns is checked on SmolLM2 by
``nox -s tool_use`` (``--smoke --check``)."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import sys
from pathlib import Path
from types import ModuleType

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

pytest.importorskip("peft")
pytest.importorskip("ludic_envs")
pytest.importorskip("ludic_agents")

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
sys.path.insert(0, str(EXAMPLES / "calculator"))

import task  # noqa: E402


@pytest.fixture(scope="module")
def tool_use() -> ModuleType:
    spec = importlib.util.spec_from_file_location("tool_use_example", EXAMPLES / "tool_use.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def tokenizer() -> object:
    from ludic_train.testing import bpe_tokenizer

    return bpe_tokenizer()


def test_the_answer_must_be_a_bare_number() -> None:
    assert task.answer_parser(" 1,035 \n").action == "1,035"
    for reply in ["The answer is 1035", "<tool_call>{}</tool_call>", ""]:
        failed = task.answer_parser(reply)
        assert failed.action is None and failed.reward == -1.0


def test_teacher_episodes_cover_its_three_habits(tokenizer: object, monkeypatch: pytest.MonkeyPatch) -> None:
    """The teacher plays through the real ToolAgent: every episode is graded, its tool calls are valid,
    and its three habits (answer at once, the first product, the whole sum) all occur."""
    # The test tokenizer's 1,024-entry vocabulary spells a call in more tokens than SmolLM2's 43.
    monkeypatch.setattr(task, "MAX_CALL_TOKENS", 256)
    engine = task.make_engine(
        task.format_teacher(tokenizer), chat_template=task.tool_chat_template(tokenizer), seed=0
    )
    requests = task.task_requests(30, seed=3, temperature=1.0, logprobs=False)
    played = asyncio.run(engine.generate_rollouts(requests, task.rollout_settings()))
    reports = [task.episode_report(r) for r in played.rollouts]
    assert len(reports) == 30 and not any(r["malformed"] for r in reports)
    assert all(r["valid_calls"] for r in reports if r["called"])
    # Whole sum asked for -> right; the first product or an estimate -> wrong.
    assert all(r["correct"] == r["right_expression"] for r in reports)
    habits = {("whole" if r["right_expression"] else "part") if r["called"] else "direct" for r in reports}
    assert habits == {"direct", "part", "whole"}
    rates = task.rates(reports)
    assert rates["success_without_tool"] == 0.0 and 0.0 < rates["success"] < 1.0


def test_a_tiny_run_end_to_end(tool_use: ModuleType, tmp_path: Path) -> None:
    args = tool_use.parse_args(
        [
            "--model", "tiny", "--teacher-episodes", "8", "--sft-steps", "2", "--steps", "2",
            "--groups-per-step", "2", "--group-size", "2", "--eval-questions", "6", "--threads", "1",
            "--out", str(tmp_path),
        ]
    )  # fmt: skip
    summary = asyncio.run(tool_use.main(args))
    assert json.loads((tmp_path / "summary.json").read_text()) == summary
    assert len(summary["train_reward"]) == 2
    assert set(summary["gain_over_warm_start"]) == {"correct", "called", "right_expression"}
    for gain in summary["gain_over_warm_start"].values():
        assert gain["n"] == 6 and gain["low"] <= gain["mean"] <= gain["high"]
    rollouts = [json.loads(line) for line in (tmp_path / "rollouts.jsonl").read_text().splitlines()]
    assert sum(1 for r in rollouts if r["meta"].get("group_id")) == 2 * 2 * 2


def test_check_names_each_broken_promise(tool_use: ModuleType) -> None:
    flat = {
        "train_reward": [0.0, 0.0, 0.05, 0.05],
        "gain_over_warm_start": {"correct": {"mean": 0.0, "low": -0.1, "high": 0.1}},
    }
    broken = tool_use.check(flat)
    assert len(broken) == 2 and "reward rose by +0.050" in broken[0] and "not above zero" in broken[1]
    rising = {
        "train_reward": [0.0, 0.2, 0.6, 0.8],
        "gain_over_warm_start": {"correct": {"mean": 0.5, "low": 0.3, "high": 0.7}},
    }
    assert tool_use.check(rising) == []
