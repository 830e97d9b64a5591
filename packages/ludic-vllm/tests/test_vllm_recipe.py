"""``ludic train tictactoe-grpo backend.kind=vllm examples/tic_tac_toe/grpo_vllm_smoke.toml`` against the session's
real vLLM (CPU) server.

The installed ``ludic`` command runs the smoke config unmodified but for where the server and its model
are (the session server's URL and model directory): it trains a LoRA on the served tiny model with
ludic-train's Trainer, samples every episode from the server through the token-level client and
publishes the merged weights over Gloo after every step. Afterwards every training rollout carries token
ids and behaviour logprobs, and the server holds exactly the weights the run saved (greedy vLLM ==
greedy transformers on ``<run_dir>/final``) at version 2, the last trainer step. With
``vllm.start_server`` the run serves an exported copy of its model instead. Under ``torchrun`` with
two servers, two FSDP2 ranks each sample half of every step from both servers, and rank 0 publishes
to both.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shlex
import socket
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from conftest import tiny_server_args

pytestmark = [pytest.mark.vllm, pytest.mark.timeout(600)]

ROOT = Path(__file__).resolve().parents[3]
SMOKE = ROOT / "examples" / "tic_tac_toe" / "grpo_vllm_smoke.toml"
TEMPLATE = ROOT / "examples" / "tic_tac_toe" / "plain_chat_template.jinja"


def _ludic_train(
    cwd: Path, *overrides: str, recipe: str = "tictactoe-grpo", smoke: Path = SMOKE
) -> subprocess.CompletedProcess[str]:
    """``ludic train <recipe> <smoke config> <overrides>``, as a user types it."""
    script = Path(sys.executable).parent / "ludic"
    command = [str(script)] if script.exists() else [sys.executable, "-m", "ludic_core.cli"]
    return subprocess.run(
        [*command, "train", recipe, str(smoke), f"chat_template={TEMPLATE}", *overrides],
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
        f"vllm.urls={vllm_server.url}",
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


def _completed_requests(url: str) -> float:
    """The requests a vLLM server has finished, from its Prometheus counter."""
    with urllib.request.urlopen(f"{url}/metrics", timeout=30) as response:
        text = response.read().decode()
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("vllm:request_success_total")
    )


def test_vllm_recipe_under_torchrun_trains_data_parallel_against_two_servers(
    vllm_server: Any, second_vllm_server: Any, tmp_path: Path
) -> None:
    pytest.importorskip("peft")
    from ludic_core.inference import SamplingParams, TokenCompletionRequest
    from ludic_vllm.client import VLLMClient
    from ludic_vllm.testing import char_ids, hf_greedy, load_hf_model

    servers = [vllm_server.url, second_vllm_server.url]
    before = [_completed_requests(url) for url in servers]
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    run_dir = tmp_path / "run"
    command = [
        sys.executable, "-m", "torch.distributed.run", "--nnodes", "1", "--nproc-per-node", "2",
        "--master-addr", "127.0.0.1", f"--master-port={port}", "-m", "ludic_core.cli",
        "train", "tictactoe-grpo", str(SMOKE), f"chat_template={TEMPLATE}",
        f"backend.model={vllm_server.model_dir}", f"vllm.urls={json.dumps(servers)}", f"run_dir={run_dir}",
    ]  # fmt: skip
    done = subprocess.run(
        command,
        cwd=tmp_path,
        env={**os.environ, "TOKENIZERS_PARALLELISM": "false", "OMP_NUM_THREADS": "1"},
        capture_output=True,
        text=True,
        timeout=540,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]

    after = [_completed_requests(url) for url in servers]
    assert all(a > b for a, b in zip(after, before, strict=True)), (before, after)  # both sampled
    logged = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    # Rank 0 logs the whole step: both ranks' 1 prompt x 2 samples.
    steps = [
        (row["step"], row.get("stats", row)["train/num_samples"]) for row in logged if "train/loss" in row
    ]
    assert steps == [(1, 4), (2, 4)]

    def rollouts(name: str) -> list[dict[str, Any]]:
        return [json.loads(line) for line in (run_dir / name).read_text().splitlines()]

    def trained(group: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [r for r in group if r["meta"]["engine"]["return_spec"]["return_chosen_logprobs"]]

    rank0, rank1 = rollouts("rollouts.jsonl"), rollouts("rollouts.rank1.jsonl")
    # Each rank sampled its own prompt of every step (2 steps x 1 prompt x 2 samples); rank 0 evaluated.
    assert len(trained(rank0)) == len(trained(rank1)) == 4 and len(rank1) == 4 and len(rank0) == 6
    groups = [{r["meta"]["request_meta"]["group_id"] for r in trained(rank)} for rank in (rank0, rank1)]
    assert len(groups[0]) == len(groups[1]) == 2 and not groups[0] & groups[1]
    versions = {r["steps"][0]["info"]["policy_version_start"] for r in trained(rank0) + trained(rank1)}
    assert versions == {0, 1}  # every rank sampled step 2 after rank 0 published version 1

    prompt = char_ids("<|user|>Your move. <|assistant|>")
    expected = hf_greedy(load_hf_model(run_dir / "final"), prompt, 12)

    async def served(url: str) -> tuple[int, list[int]]:
        async with VLLMClient(base_url=url, model="tiny") as client:
            version = await client.get_policy_version()
            greedy = await client.complete_tokens(
                TokenCompletionRequest(
                    prompt_token_ids=prompt, sampling=SamplingParams(temperature=0.0, max_tokens=12)
                )
            )
        return version, list(greedy.completion_token_ids)

    for url in servers:
        assert asyncio.run(served(url)) == (2, list(expected)), url  # both serve the final weights


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


GSM8K_DATA = Path(os.environ.get("LUDIC_DATA_DIR", ROOT.parent / "shared" / "data")) / "gsm8k"


@pytest.mark.skipif(
    not (GSM8K_DATA / "train.jsonl").exists(),
    reason=f"no GSM8K data at {GSM8K_DATA}: set LUDIC_DATA_DIR to the folder holding gsm8k/train.jsonl",
)
def test_gsm8k_vllm_recipe_trains_on_the_real_rows(vllm_server: Any, tmp_path: Path) -> None:
    """``ludic train gsm8k-grpo backend.kind=vllm examples/gsm8k/grpo_vllm_smoke.toml``: one step on real GSM8K rows
    sampled by the server, then an evaluation on the test split at the published version."""
    pytest.importorskip("peft")
    pytest.importorskip("datasets")
    data = [
        f'{table}.data_files.{split}="{GSM8K_DATA / f"{split}.jsonl"}"'
        for table in ("env_kwargs", "eval_env_kwargs")
        for split in ("train", "test")
    ]
    run_dir = tmp_path / "run"
    done = _ludic_train(
        tmp_path,
        f"backend.model={vllm_server.model_dir}",
        f"vllm.urls={vllm_server.url}",
        f"run_dir={run_dir}",
        *data,
        recipe="gsm8k-grpo",
        smoke=ROOT / "examples" / "gsm8k" / "grpo_vllm_smoke.toml",
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    logged = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [row["step"] for row in logged if "train/loss" in row] == [1]
    assert any("eval/accuracy" in row.get("stats", row) for row in logged)
    rollouts = [json.loads(line) for line in (run_dir / "rollouts.jsonl").read_text().splitlines()]
    trained = [r for r in rollouts if r["meta"]["engine"]["return_spec"]["return_chosen_logprobs"]]
    assert len(trained) == 2 * 2 and len(rollouts) == 2 * 2 + 2  # prompts x samples, then 2 evaluated
    assert all(r["steps"][0]["trace"]["completion_logprobs"] for r in trained)
    assert {r["steps"][0]["info"]["policy_version_start"] for r in rollouts if r not in trained} == {1}
