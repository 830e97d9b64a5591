"""``ludic rollouts --backend vllm`` against the session's real vLLM (CPU) server, then ``ludic train
offline-rl`` on what it collected: token-level rollouts from a running server that train on-policy.

The server is vLLM's own OpenAI server (the Ludic extension plays no part here); the backend renders
prompts with the served model's tokenizer (a copy given a chat template, since the tiny test tokenizer
has none), sends token ids to ``/v1/completions`` and records the completion's token ids and
behaviour logprobs. The trainer then loads the same weights from the model directory: its first step
reproduces the server's logprobs (the importance ratio is 1 up to vLLM-versus-transformers numerics).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = [pytest.mark.vllm, pytest.mark.timeout(600)]

ROOT = Path(__file__).resolve().parents[3]
TEMPLATE = ROOT / "examples" / "tic_tac_toe" / "plain_chat_template.jinja"


def _ludic(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    script = Path(sys.executable).parent / "ludic"
    command = [str(script)] if script.exists() else [sys.executable, "-m", "ludic_core.cli"]
    return subprocess.run(
        [*command, *args],
        cwd=cwd,
        env={**os.environ, "TOKENIZERS_PARALLELISM": "false"},
        capture_output=True,
        text=True,
        timeout=540,
    )


def test_rollouts_from_a_running_server_are_token_level_and_train_on_policy(
    vllm_server: Any, tmp_path: Path
) -> None:
    pytest.importorskip("ludic_train")
    pytest.importorskip("ludic_envs")
    pytest.importorskip("ludic_agents")
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(vllm_server.model_dir))
    tokenizer.chat_template = TEMPLATE.read_text()
    tokenizer.save_pretrained(tmp_path / "tokenizer")

    done = _ludic(
        tmp_path, "rollouts", "tictactoe", "--backend", "vllm", "--base-url", f"{vllm_server.url}/v1",
        "--model", "tiny", f"backend.tokenizer={tmp_path / 'tokenizer'}", "-n", "2", "-k", "2",
        "--temperature", "1", "--max-tokens", "8", "rollout.max_steps=1", 'system_prompt="Play."',
        "-o", "data.jsonl", "--run-dir", "collect",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    rows = [json.loads(line) for line in (tmp_path / "data.jsonl").read_text().splitlines()]
    assert len(rows) == 4
    turns = [step for row in rows for step in row["steps"] if step["kind"] == "agent"]
    assert turns and all(step["info"].get("token_level", True) for step in turns)
    assert all(step["trace"]["completion_logprobs"] for step in turns)

    done = _ludic(
        tmp_path, "train", "offline-rl", f"model={vllm_server.model_dir}", 'data=["data.jsonl"]',
        "batch_size=4", "algorithm=reinforce", "algorithm_kwargs.importance_sampling=token", "run_dir=run",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    [step] = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    stats = step.get("stats", step)
    assert stats["train/num_samples"] == 4 and stats["train/grad_norm"] > 0
    assert abs(stats["tis/mismatch_kl"]) < 1e-2 and stats["tis/weight_mean"] == pytest.approx(1.0, abs=0.05)
