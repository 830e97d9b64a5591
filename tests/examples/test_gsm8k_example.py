"""The GSM8K example's request helpers (which ``train_tinker.py`` trains on) on real GSM8K rows, and the
pointer from ``train.py`` to the ``ludic train`` recipes. Local training is ``ludic train gsm8k-grpo``,
run on its smoke config by tests/cli; the Tinker run is ludic-tinker's test_gsm8k_example.py."""

from __future__ import annotations

import argparse
import importlib.util
import os
from pathlib import Path
from types import ModuleType

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

pytest.importorskip("datasets")
pytest.importorskip("ludic_envs")

ROOT = Path(__file__).resolve().parents[2]
DATA = Path(os.environ.get("LUDIC_DATA_DIR", "")) / "gsm8k"


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gsm8k_train", ROOT / "examples" / "gsm8k" / "train.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.skipif(
    not (DATA / "train.jsonl").is_file(),
    reason="no GSM8K data: set LUDIC_DATA_DIR to a folder holding gsm8k/train.jsonl and gsm8k/test.jsonl "
    "(the openai/gsm8k hub dataset saved with datasets' to_json); CI sets it",
)
def test_prompts_are_real_gsm8k_questions() -> None:
    train = _load()
    args = argparse.Namespace(
        data_dir=DATA,
        split="train",
        eval_split="test",
        seed=0,
        group_size=2,
        rollouts_per_update=4,
        train_temperature=1.0,
        max_completion_tokens=8,
    )
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


def test_local_training_points_at_the_recipes() -> None:
    with pytest.raises(SystemExit, match=r"ludic train gsm8k-grpo examples/gsm8k/grpo\.toml"):
        _load().cli(["--backend", "local"])
