from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

from ludic_core.errors import ConfigError, DataError, ProtocolError
from ludic_core.registry import make_env
from ludic_core.testing import check_env
from ludic_envs.qa import DatasetQAEnv, load_rows

ROWS = 60  # real rows checked per dataset (the issue asks for at least 50)


@pytest.fixture(scope="module")
def gsm8k_file(shared_data: Path) -> Path:
    return shared_data / "gsm8k" / "test.jsonl"


@pytest.fixture(scope="module")
def math_file(shared_data: Path) -> Path:
    return shared_data / "math500" / "test.jsonl"


def _answer(env: Any, action: str) -> Any:
    env.reset(seed=0)
    return env.step({"agent_0": action})["agent_0"]


def test_dataset_qa_env_grades_one_answer() -> None:
    env = DatasetQAEnv(
        {"question": "2+2?", "answer": "Four", "id": 7}, correct_reward=2.0, incorrect_reward=-1.0
    )
    obs, info = env.reset()["agent_0"]
    assert obs == "2+2?" and info == {"question_id": "7"}
    out = env.step({"agent_0": " four "})["agent_0"]
    assert out.terminated and out.reward == 2.0 and out.obs == "Correct."
    assert out.info["parsed_answer"] == "four" and out.info["target_answer"] == "Four"
    with pytest.raises(ProtocolError, match="already answered"):
        env.step({"agent_0": "four"})
    env.reset()
    out = env.step({"agent_0": "five"})["agent_0"]
    assert out.reward == -1.0 and "Expected Four" in out.obs
    env.reset()
    assert env.step({"agent_0": "  "})["agent_0"].info["answer_found"] is False


def test_dataset_qa_env_errors_name_the_field() -> None:
    with pytest.raises(ConfigError, match="exactly one"):
        DatasetQAEnv()
    with pytest.raises(ConfigError, match="index"):
        DatasetQAEnv(samples=[{"question": "q", "answer": "a"}], index=3)
    env = DatasetQAEnv({"prompt": "q", "answer": "a"})
    with pytest.raises(DataError, match="'question'"):
        env.reset()
    with pytest.raises(ConfigError, match="correct_reward"):
        DatasetQAEnv({"question": "q", "answer": "a"}, correct_reward=float("inf"))


def test_seed_picks_the_row_reproducibly() -> None:
    rows = [{"question": f"q{i}", "answer": str(i)} for i in range(100)]
    state = random.getstate()
    env = DatasetQAEnv(samples=rows)
    first = [env.reset(seed=s)["agent_0"][0] for s in range(10)]
    again = [DatasetQAEnv(samples=rows).reset(seed=s)["agent_0"][0] for s in range(10)]
    assert first == again and len(set(first)) > 5
    assert random.getstate() == state
    check_env(DatasetQAEnv(samples=rows), actions=["1", "2", "q"])


def test_gsm8k_real_rows(gsm8k_file: Path) -> None:
    rows = load_rows(split="test", data_files=gsm8k_file)
    assert len(rows) == 1319
    assert rows is load_rows(split="test", data_files=str(gsm8k_file))  # cached per process
    for i in range(ROWS):
        row = rows[i]
        env = make_env("gsm8k", split="test", data_files=str(gsm8k_file), index=i)
        obs, info = env.reset()["agent_0"]
        assert obs == row["question"] and info["sample_index"] == i
        target = row["answer"].split("####")[-1].strip()
        # The reference solution itself, and reformattings of its number, are correct.
        assert _answer(env, row["answer"]).info["correct"], i
        number = int(target.replace(",", ""))
        for variant in (
            f"{number:,}",
            f"${number}.00",
            f"The answer is {number} dollars.",
            f"\\boxed{{{number}}}",
        ):
            out = _answer(env, variant)
            assert out.info["correct"] and out.reward == 1.0, (i, variant, out.info)
        for wrong in (str(number + 1), f"{-number if number else 1}", "I don't know"):
            out = _answer(env, wrong)
            assert not out.info["correct"] and out.reward == 0.0, (i, wrong)


def test_math500_real_rows(math_file: Path) -> None:
    rows = load_rows(split="test", data_files=math_file)
    answers = [rows[i]["answer"] for i in range(ROWS)]
    wrong_accepted = 0
    for i in range(ROWS):
        row = rows[i]
        env = make_env("math", data_files=str(math_file), index=i)
        obs, info = env.reset()["agent_0"]
        assert obs == row["problem"] and info["question_id"] == row["unique_id"]
        out = _answer(env, row["solution"])  # last \boxed{} of the worked solution
        assert out.info["correct"] and out.info["target_answer"] == row["answer"].strip(), (i, out.info)
        assert _answer(env, f"Final answer: $\\boxed{{{row['answer']}}}$").info["correct"]
        # Another row's answer is wrong unless the two answers happen to be the same.
        other = answers[(i + 7) % ROWS]
        if other.strip() != row["answer"].strip():
            wrong_accepted += _answer(env, f"\\boxed{{{other}}}").info["correct"]
    assert wrong_accepted == 0


def test_math500_equivalent_forms_need_math_verify(math_file: Path) -> None:
    pytest.importorskip("math_verify", reason="math-verify comes with the hf/math extra")
    rows = load_rows(split="test", data_files=math_file)
    checked = 0
    for i in range(len(rows)):
        answer = rows[i]["answer"].strip()
        if not answer.lstrip("-").isdigit():
            continue
        env = make_env("math", data_files=str(math_file), index=i)
        strict = make_env("math", data_files=str(math_file), index=i, use_math_verify=False)
        variant = f"\\boxed{{{answer}.0}}"
        assert _answer(env, variant).info["correct"], (i, answer)
        assert _answer(strict, f"\\boxed{{{answer}}}").info["correct"]
        checked += 1
        if checked == 50:
            break
    assert checked == 50


def test_registered_envs(gsm8k_file: Path) -> None:
    env = make_env("dataset_qa", sample={"question": "q", "answer": "a"})
    assert isinstance(env, DatasetQAEnv)
    row = load_rows(split="test", data_files=gsm8k_file)[3]
    env = make_env("gsm8k", sample=dict(row))  # a given sample needs no dataset at all
    assert _answer(env, row["answer"]).info["correct"]
