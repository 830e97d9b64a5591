"""FSDP2 (fully_shard) on 2 CPU processes over gloo: the sharded run matches a single-process run."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from fsdp_common import STEPS, batches, make_trainer

from ludic_train.checkpoint import CheckpointConfig, CheckpointManager
from ludic_train.testing import bpe_tokenizer, tiny_causal_lm

fsdp = pytest.importorskip("torch.distributed.fsdp")
if not hasattr(fsdp, "fully_shard") or not torch.distributed.is_gloo_available():
    pytest.skip("this torch build has no fully_shard or no gloo backend", allow_module_level=True)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.slow
def test_two_rank_fsdp2_matches_single_process_training(tmp_path: Path) -> None:
    worker = Path(__file__).with_name("fsdp_worker.py")
    proc = subprocess.run(
        [sys.executable, str(worker), str(tmp_path), str(_free_port())], capture_output=True, timeout=150
    )
    assert proc.returncode == 0, proc.stderr.decode()[-4000:]
    sharded = torch.load(tmp_path / "fsdp_params.pt", weights_only=True)

    reference_model = tiny_causal_lm(bpe_tokenizer(), seed=1)
    before = {k: v.clone() for k, v in reference_model.state_dict().items()}
    reference_history = make_trainer(reference_model, batches(rank=0, world_size=1)).train_sync(STEPS)
    reference = reference_model.state_dict()
    assert set(sharded) == set(reference)
    for name, value in reference.items():
        torch.testing.assert_close(sharded[name], value, rtol=1e-4, atol=1e-6, msg=name)
    assert any(not torch.equal(before[k], reference[k]) for k in reference)

    # Every rank logs the whole macro-batch's stats (item-weighted means, summed counts, the global grad
    # norm), equal to what the single process logs for the same batch.
    for rank in (0, 1):
        history = json.loads((tmp_path / f"metrics_rank{rank}.json").read_text())
        assert len(history) == STEPS
        for sharded_step, reference_step in zip(history, reference_history, strict=True):
            for key in ("train/loss", "train/grad_norm", "train/num_samples", "train/num_action_tokens"):
                assert sharded_step[key] == pytest.approx(reference_step[key], rel=1e-4), (rank, key)
    assert reference_history[0]["train/grad_norm"] > 0.5  # clipping was active

    # The checkpoint written collectively by the two ranks loads into a plain (unsharded) model.
    manager = CheckpointManager(CheckpointConfig(tmp_path / "ckpt"))
    plain = tiny_causal_lm(bpe_tokenizer(), seed=5)
    assert manager.load(STEPS, model=plain).step == STEPS
    for name, value in plain.state_dict().items():
        torch.testing.assert_close(value, reference[name], rtol=1e-4, atol=1e-6, msg=name)
