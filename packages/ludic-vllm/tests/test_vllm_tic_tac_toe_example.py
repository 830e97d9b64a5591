"""CPU smoke run of ``examples/tic_tac_toe/train.py --backend vllm`` against the session's real vLLM server.

The example's ``main`` runs unmodified: it trains a LoRA on the served tiny model with ludic-train's
Trainer, samples every rollout from the vLLM server and publishes the merged weights over Gloo after
every step. Afterwards the server must hold exactly the weights the example saved (greedy vLLM ==
greedy transformers on ``--final-save``) at version 2. The tiny model's tokenizer has no chat
template, so the test hands the example a plain one (``--chat-template``).
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

pytestmark = [pytest.mark.vllm, pytest.mark.timeout(600)]

EXAMPLE_DIR = Path(__file__).resolve().parents[3] / "examples" / "tic_tac_toe"
PLAIN_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }} {% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)


def _load_example() -> ModuleType:
    sys.path.insert(0, str(EXAMPLE_DIR))
    spec = importlib.util.spec_from_file_location("ttt_train", EXAMPLE_DIR / "train.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


async def test_train_example_samples_from_vllm_and_publishes_every_step(
    vllm_server: Any, tmp_path: Path
) -> None:
    pytest.importorskip("peft")
    pytest.importorskip("ludic_envs")
    pytest.importorskip("ludic_agents")
    from ludic_core.inference import SamplingParams, TokenCompletionRequest
    from ludic_vllm.client import VLLMClient
    from ludic_vllm.testing import char_ids, hf_greedy, load_hf_model

    example = _load_example()
    template = tmp_path / "template.jinja"
    template.write_text(PLAIN_TEMPLATE)
    final = tmp_path / "final"
    metrics = tmp_path / "metrics.jsonl"
    args = example.parse_args(
        [
            "--backend",
            "vllm",
            "--model",
            str(vllm_server.model_dir),
            "--chat-template",
            str(template),
            "--vllm-url",
            vllm_server.url,
            "--vllm-model-name",
            "tiny",
            "--vllm-transport",
            "gloo",
            "--vllm-timeout-s",
            "120",
            "--train-steps",
            "2",
            "--group-size",
            "2",
            "--rollouts-per-update",
            "4",
            "--max-steps-per-episode",
            "1",
            "--max-completion-tokens",
            "8",
            "--lr",
            "0.05",
            "--eval-every",
            "0",
            "--checkpoint-dir",
            str(tmp_path / "ckpt"),
            "--logger",
            "jsonl",
            "--metrics",
            str(metrics),
            "--final-save",
            str(final),
        ]
    )
    results = await example.main(args)

    assert len(results) == 2
    logged = [json.loads(line) for line in metrics.read_text().splitlines()]
    assert [row["step"] for row in logged if "train/loss" in row] == [1, 2]
    prompt = char_ids("<|user|>Your move. <|assistant|>")
    async with VLLMClient(base_url=vllm_server.url, model="tiny") as client:
        assert await client.get_policy_version() == 2
        greedy = await client.complete_tokens(
            TokenCompletionRequest(
                prompt_token_ids=prompt, sampling=SamplingParams(temperature=0.0, max_tokens=12)
            )
        )
    assert greedy.policy_version == 2
    assert list(greedy.completion_token_ids) == hf_greedy(load_hf_model(final), prompt, 12)
