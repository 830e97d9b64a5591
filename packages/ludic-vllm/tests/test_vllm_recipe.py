"""``ludic train tictactoe-grpo-vllm examples/tic_tac_toe/grpo_vllm_smoke.toml`` against the session's
real vLLM (CPU) server.

The installed ``ludic`` command runs the smoke config unmodified but for where the server and its model
are (the session server's URL and model directory): it trains a LoRA on the served tiny model with
ludic-train's Trainer, samples every episode from the server through the token-level client and
publishes the merged weights over Gloo after every step. Afterwards every training rollout carries token
ids and behaviour logprobs, and the server holds exactly the weights the run saved (greedy vLLM ==
greedy transformers on ``<run_dir>/final``) at version 2, the last trainer step. With
``vllm.start_server`` the run serves an exported copy of its model instead.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import tiny_server_args

pytestmark = [pytest.mark.vllm, pytest.mark.timeout(600)]

ROOT = Path(__file__).resolve().parents[3]
SMOKE = ROOT / "examples" / "tic_tac_toe" / "grpo_vllm_smoke.toml"
TEMPLATE = ROOT / "examples" / "tic_tac_toe" / "plain_chat_template.jinja"


def _ludic_train(cwd: Path, *overrides: str) -> subprocess.CompletedProcess[str]:
    """``ludic train tictactoe-grpo-vllm <smoke config> <overrides>``, as a user types it."""
    script = Path(sys.executable).parent / "ludic"
    command = [str(script)] if script.exists() else [sys.executable, "-m", "ludic_core.cli"]
    return subprocess.run(
        [*command, "train", "tictactoe-grpo-vllm", str(SMOKE), f"chat_template={TEMPLATE}", *overrides],
        cwd=cwd,
        env={**os.environ, "TOKENIZERS_PARALLELISM": "false"},
        capture_output=True,
        text=True,
        timeout=540,
    )


def test_vllm_recipe_samples_from_the_server_and_publishes_every_step(
    vllm_server: Any, tmp_path: Path
) -> None:
    pytest.importorskip("peft")
    pytest.importorskip("ludic_train")
    pytest.importorskip("ludic_envs")
    pytest.importorskip("ludic_agents")
    from ludic_core.inference import SamplingParams, TokenCompletionRequest
    from ludic_vllm.client import VLLMClient
    from ludic_vllm.testing import char_ids, hf_greedy, load_hf_model

    run_dir = tmp_path / "run"
    done = _ludic_train(
        tmp_path,
        f"backend.model={vllm_server.model_dir}",
        f"vllm.url={vllm_server.url}",
        f"run_dir={run_dir}",
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]

    logged = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [row["step"] for row in logged if "train/loss" in row] == [1, 2]
    assert any("eval/win_rate" in row for row in logged)
    rollouts = [json.loads(line) for line in (run_dir / "rollouts.jsonl").read_text().splitlines()]
    sampled_for_training = [
        r for r in rollouts if r["meta"]["engine"]["return_spec"]["return_chosen_logprobs"]
    ]
    evaluated = [r for r in rollouts if r not in sampled_for_training]
    assert (len(sampled_for_training), len(evaluated)) == (2 * 2 * 2, 2)  # steps x prompts x samples; eval
    for rollout in sampled_for_training:
        trace = rollout["steps"][0]["trace"]
        assert trace["prompt_token_ids"] and trace["completion_token_ids"]
        assert len(trace["completion_logprobs"]) == len(trace["completion_token_ids"])

    def versions(group: list[dict[str, Any]]) -> set[int]:
        return {r["steps"][0]["info"]["policy_version_start"] for r in group}

    # Step 1 sampled the weights published at the start (version 0), step 2 those after step 1; the
    # evaluation after step 2 those after step 2.
    assert versions(sampled_for_training) == {0, 1} and versions(evaluated) == {2}

    prompt = char_ids("<|user|>Your move. <|assistant|>")

    async def served() -> tuple[int, Any]:
        async with VLLMClient(base_url=vllm_server.url, model="tiny") as client:
            version = await client.get_policy_version()
            greedy = await client.complete_tokens(
                TokenCompletionRequest(
                    prompt_token_ids=prompt, sampling=SamplingParams(temperature=0.0, max_tokens=12)
                )
            )
        return version, greedy

    version, greedy = asyncio.run(served())
    assert version == 2 and greedy.policy_version == 2
    assert list(greedy.completion_token_ids) == hf_greedy(load_hf_model(run_dir / "final"), prompt, 12)


def test_start_server_serves_an_export_of_the_trainers_model_then_removes_it(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    """``vllm.start_server``: the run exports the model it trains, starts ``ludic-vllm serve`` on the copy
    (logging into the run directory), trains against it, and removes the copy at the end."""
    pytest.importorskip("vllm")
    pytest.importorskip("peft")
    run_dir = tmp_path / "run"
    done = _ludic_train(
        tmp_path,
        f"backend.model={tiny_model_dir}",
        "vllm.start_server=true",
        f"vllm.server_args={json.dumps(shlex.join(tiny_server_args()))}",
        "steps=1",
        "trainer.eval_every_steps=1",
        f"run_dir={run_dir}",
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    logged = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [row["step"] for row in logged if "train/loss" in row] == [1]
    log = (run_dir / "vllm-server.log").read_text()
    served = re.search(r"/[^\s'\"]*ludic-served-model-[^\s'\"/]+", log)
    assert served is not None, log[-3000:]  # it served the export, not the directory it was given
    assert not Path(served.group(0)).exists()  # and removed the export when the run ended
