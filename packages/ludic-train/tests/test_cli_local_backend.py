"""``ludic eval`` / ``ludic rollouts --backend local``: the command run as a subprocess, sampling in-process
from the tiny model through LocalPolicyClient and ludic-agents' Agent. Unlike the message-level openai
backend, these rollouts carry token ids and behaviour logprobs, so they become trainable SAW items."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from ludic_core.credit import MonteCarloReturn
from ludic_core.rollout_log import read_rollouts
from ludic_core.saw_builder import build_saw_items

TIMEOUT_S = 240


def ludic(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    return subprocess.run(
        [sys.executable, "-m", "ludic_core.cli", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )


def test_eval_samples_the_local_model_and_logs_trainable_episodes(tmp_path: Path) -> None:
    done = ludic(
        "eval",
        "tictactoe",
        "--backend",
        "local",
        "--model",
        "tiny",
        "-n",
        "3",
        "--run-dir",
        "run",
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    assert "Warning" not in done.stderr, done.stderr  # no library warning on a tiny run
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert metrics["num_episodes"] == 3 and metrics["num_failed_episodes"] == 0
    rates = [metrics[k] for k in ("win_rate", "draw_rate", "loss_rate", "illegal_rate", "parse_error_rate")]
    assert abs(sum(rates) + metrics["failed_rate"] + metrics["unfinished_rate"] - 1.0) < 1e-9
    rollouts = list(read_rollouts(tmp_path / "run" / "episodes.jsonl"))
    assert len(rollouts) == 3
    items = build_saw_items(rollouts, MonteCarloReturn().compute(rollouts), require_actor_logps=True)
    assert items and all(item.actor_logps is not None for item in items)


def test_a_missing_model_is_named_before_anything_runs(tmp_path: Path) -> None:
    done = ludic(
        "eval", "tictactoe", "--backend", "local", "--model", "no/such/dir", "--run-dir", "run", cwd=tmp_path
    )
    assert done.returncode == 2
    assert (
        "backend.model 'no/such/dir' is neither a model directory nor one of ['tiny', 'smollm2']"
        in done.stderr
    )


def test_the_tiny_models_adapted_head_merges_into_exactly_the_trained_model() -> None:
    """The smoke configs adapt the head of `tiny` (`lora.include_lm_head`): its head is its own, so
    PEFT has nothing to warn about and the merged weights (what is published and exported) compute
    what the adapted model computes."""
    import warnings

    import torch

    from ludic_train.cli_backend import load_local_model
    from ludic_train.lora import apply_lora
    from ludic_train.weights import merged_state_dict

    base, _tokenizer = load_local_model("tiny", seed=0)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model = apply_lora(base, rank=4, include_lm_head=True)
    assert [str(w.message) for w in caught] == []
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "lora_B" in name:  # a trained adapter: non-zero deltas everywhere, the head's included
                parameter.copy_(torch.randn(parameter.shape, generator=generator) * 0.05)
        ids = torch.tensor([[1, 5, 9, 30, 2, 17]])
        trained = model(input_ids=ids).logits
        fresh, _ = load_local_model("tiny", seed=1)
        assert not fresh.load_state_dict(merged_state_dict(model), strict=True).missing_keys
        merged = fresh(input_ids=ids).logits
    assert torch.allclose(merged, trained, atol=1e-4), (merged - trained).abs().max()
