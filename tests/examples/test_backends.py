"""``examples/backends.py``: the shared ``--backend`` options and the local backend.

The vLLM backend runs end to end in ludic-vllm's ``vllm`` session
(``test_vllm_tic_tac_toe_example.py``); Tinker in ludic-tinker's tests.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

pytest.importorskip("ludic_train")

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
sys.path.insert(0, str(EXAMPLES))

from backends import add_backend_arguments, open_backend, vllm_config  # noqa: E402


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser()
    add_backend_arguments(parser)
    return parser


def test_arguments_default_to_local_and_map_the_vllm_flags_onto_one_config() -> None:
    args = _parser().parse_args([])
    assert args.backend == "local"
    with pytest.raises(SystemExit):
        _parser().parse_args(["--backend", "sglang"])
    args = _parser().parse_args(
        ["--backend", "vllm", "--vllm-transport", "files", "--vllm-weights-dir", "/w"]
    )
    assert (args.backend, args.vllm_transport) == ("vllm", "files")
    if importlib.util.find_spec("ludic_vllm") is None:
        return
    from ludic_core.errors import ConfigError

    config = vllm_config(args)
    assert (config.transport, config.weights_dir, config.timeout_s) == ("files", "/w", 600.0)
    with pytest.raises(ConfigError, match="weights_dir"):  # the library validates what the flags say
        vllm_config(_parser().parse_args(["--backend", "vllm", "--vllm-transport", "files"]))


async def test_local_backend_samples_from_the_model_and_publishing_moves_its_version() -> None:
    from ludic_core.inference import SamplingParams, TokenCompletionRequest
    from ludic_train.local_client import LocalPolicyClient
    from ludic_train.testing import bpe_tokenizer, tiny_causal_lm

    tokenizer = bpe_tokenizer()
    model = tiny_causal_lm(tokenizer, seed=0)
    backend = await open_backend(_parser().parse_args([]), model=model, tokenizer=tokenizer, seed=0)
    try:
        assert backend.name == "local"
        assert isinstance(backend.client, LocalPolicyClient)
        await backend.publisher.publish({}, version=3)
        response = await backend.client.complete_tokens(
            TokenCompletionRequest(
                prompt_token_ids=tokenizer.encode("hello"), sampling=SamplingParams(max_tokens=4), seed=1
            )
        )
        assert response.policy_version == 3
        assert 1 <= len(response.completion_token_ids) <= 4
    finally:
        await backend.close()
        await backend.client.aclose()


async def test_tinker_is_routed_to_its_own_script() -> None:
    args = _parser().parse_args(["--backend", "tinker"])
    with pytest.raises(SystemExit, match=r"train_tinker\.py"):
        await open_backend(args, model=None, tokenizer=None)
