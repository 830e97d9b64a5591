"""NCCL weight updates on real GPUs: a vLLM server on cuda:0, the trainer's publisher on cuda:1.

Runs wherever vLLM (CUDA build) and two CUDA devices are present (NCCL cannot pair two processes on one
device); skipped elsewhere. The same control flow runs over Gloo on CPU in test_vllm_server.py.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import pytest

pytestmark = [pytest.mark.gpu, pytest.mark.vllm, pytest.mark.timeout(900)]


def _two_gpus() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available() and torch.cuda.device_count() >= 2


requires = pytest.mark.skipif(
    not (_two_gpus() and importlib.util.find_spec("vllm") is not None),
    reason="needs vLLM and two CUDA devices",
)


@pytest.fixture(scope="module")
def gpu_server(tmp_path_factory: pytest.TempPathFactory) -> Any:
    from ludic_vllm.launch import VLLMServer
    from ludic_vllm.testing import build_tiny_llama

    model_dir = build_tiny_llama(tmp_path_factory.mktemp("gpu-tiny"))
    server = VLLMServer(
        str(model_dir),
        [
            "--served-model-name",
            "tiny",
            "--dtype",
            "float32",
            "--max-model-len",
            "512",
            "--enforce-eager",
            "--gpu-memory-utilization",
            "0.3",
        ],
        env={"CUDA_VISIBLE_DEVICES": "0", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"},
        log_path=tmp_path_factory.mktemp("logs") / "gpu-server.log",
        startup_timeout_s=600,
    )
    server.start()
    yield server, Path(model_dir)
    server.stop()


@requires
async def test_nccl_publish_matches_transformers_greedy(gpu_server: Any) -> None:
    import torch

    from ludic_core.inference import SamplingParams, TokenCompletionRequest
    from ludic_vllm.client import VLLMClient
    from ludic_vllm.publisher import NcclPublisher, PublishSettings
    from ludic_vllm.testing import (
        char_ids,
        hf_greedy,
        load_hf_model,
        load_state_into,
        perturbed,
        state_dict_copy,
    )

    server, model_dir = gpu_server
    model = load_hf_model(model_dir)
    new = perturbed(state_dict_copy(model), seed=5)
    load_state_into(model, new)
    prompt = char_ids("Once upon a time")
    publisher = NcclPublisher(
        server.url,
        device="cuda:1",
        connect_timeout_s=120,
        bucket_bytes=2**20,
        settings=PublishSettings(timeout_s=120),
    )
    try:
        on_gpu = {k: v.to("cuda:1") for k, v in new.items()}
        for version in (1, 2):
            await publisher.publish(on_gpu, version=version)
            async with VLLMClient(base_url=server.url, model="tiny") as client:
                out = await client.complete_tokens(
                    TokenCompletionRequest(
                        prompt_token_ids=prompt, sampling=SamplingParams(temperature=0.0, max_tokens=24)
                    )
                )
            assert out.policy_version == version
            assert list(out.completion_token_ids) == hf_greedy(model, prompt, 24)
            new = perturbed(new, seed=6)
            load_state_into(model, new)
            on_gpu = {k: v.to("cuda:1") for k, v in new.items()}
        torch.cuda.synchronize()
    finally:
        await publisher.aclose()
