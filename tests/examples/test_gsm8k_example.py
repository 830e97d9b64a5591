"""CPU smoke run of the GSM8K example: a tiny random model, real GSM8K rows, eval before and after."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
from pathlib import Path
from types import ModuleType

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

pytest.importorskip("peft")
pytest.importorskip("datasets")
pytest.importorskip("ludic_envs")
pytest.importorskip("ludic_agents")

ROOT = Path(__file__).resolve().parents[2]
DATA = Path(os.environ.get("LUDIC_DATA_DIR", "")) / "gsm8k"

pytestmark = pytest.mark.skipif(
    not (DATA / "train.jsonl").is_file(),
    reason="no GSM8K data: set LUDIC_DATA_DIR to a folder holding gsm8k/train.jsonl and gsm8k/test.jsonl "
    "(the openai/gsm8k hub dataset saved with datasets' to_json); CI sets it",
)


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gsm8k_train", ROOT / "examples" / "gsm8k" / "train.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _argv(tmp_path: Path, *extra: str) -> list[str]:
    return [
        "--model",
        "tiny",
        "--data-dir",
        str(DATA),
        "--limit",
        "4",
        "--eval-limit",
        "3",
        "--train-steps",
        "2",
        "--group-size",
        "2",
        "--rollouts-per-update",
        "4",
        "--max-completion-tokens",
        "8",
        "--lora-rank",
        "4",
        "--lr",
        "1e-3",
        "--eval-before-start",
        "--eval-every",
        "2",
        "--checkpoint-dir",
        str(tmp_path / "ckpt"),
        "--checkpoint-every",
        "2",
        "--logger",
        "jsonl",
        "--metrics",
        str(tmp_path / "metrics.jsonl"),
        "--micro-token-budget",
        "4096",
        *extra,
    ]


@pytest.mark.parametrize("algorithm", ["grpo", "gspo"])
def test_train_smoke_evaluates_before_and_after(tmp_path: Path, algorithm: str) -> None:
    train = _load()
    args = train.parse_args(_argv(tmp_path, "--algorithm", algorithm, "--eval-group-size", "2"))
    results = asyncio.run(train.main(args))
    assert [r["train/step"] for r in results] == [1.0, 2.0]
    assert (tmp_path / "ckpt" / "step_000002" / "state.pt").is_file()

    records = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    evals = [r for r in records if "eval/accuracy" in r]
    assert len(evals) == 2, "one evaluation before training and one after the last step"
    for metrics in evals:
        # 3 test questions × 2 answers each, every one accounted for.
        assert metrics["eval/num_rollouts"] == 6
        assert 0.0 <= metrics["eval/accuracy"] <= metrics["eval/pass@2"] <= 1.0
        assert metrics["eval/pass@1"] == pytest.approx(metrics["eval/accuracy"])
        assert 0.0 <= metrics["eval/parse_error_rate"] <= 1.0
        # A random model never closes a \boxed{} in 8 tokens: every answer is a parse error and wrong.
        assert metrics["eval/parse_error_rate"] == 1.0 and metrics["eval/accuracy"] == 0.0
        assert 0 < metrics["eval/completion_length_mean"] <= 8


def test_prompts_are_real_gsm8k_questions(tmp_path: Path) -> None:
    train = _load()
    args = train.parse_args(_argv(tmp_path))
    rows = train.load_split(args, "train", 4)
    requests = train.train_requests(args, rows)
    first, second = requests(0), requests(1)
    assert (
        len(first) == 4
        and first[0].meta["group_id"] == first[1].meta["group_id"] != first[2].meta["group_id"]
    )
    indices = {r.env.kwargs["index"] for r in first + second}
    assert indices == {0, 1, 2, 3}, "two steps of two questions cover the 4 rows once"
    assert requests(1) == second, "requests are a pure function of the step"
    assert first[0].env.kwargs["data_files"]["train"].endswith("train.jsonl")


def test_other_backends_fail_with_a_pointer(tmp_path: Path) -> None:
    train = _load()
    with pytest.raises(SystemExit, match=r"train_tinker\.py"):
        asyncio.run(train.main(train.parse_args([*_argv(tmp_path), "--backend", "tinker"])))
    with pytest.raises(SystemExit, match="multiple of --group-size"):
        asyncio.run(train.main(train.parse_args([*_argv(tmp_path), "--rollouts-per-update", "5"])))
