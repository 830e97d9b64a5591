"""Subprocess for the FSDP2 test: 2 CPU ranks over gloo train the tiny model with SFT.

Usage: ``python fsdp_worker.py OUT_DIR PORT``. Rank r trains on its half of a fixed batch; the result
(params after training, each rank's step metrics, checkpoint) goes to OUT_DIR for the parent to compare
with a single-process run over the whole batch.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).parent))

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from fsdp_common import STEPS, batches, make_trainer

from ludic_train.checkpoint import CheckpointConfig, CheckpointManager
from ludic_train.fsdp import shard_model
from ludic_train.testing import bpe_tokenizer, tiny_causal_lm
from ludic_train.weights import merged_state_dict


def run(rank: int, out_dir: str, port: int) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    try:
        model = shard_model(tiny_causal_lm(bpe_tokenizer(), seed=1))
        manager = CheckpointManager(CheckpointConfig(Path(out_dir) / "ckpt", every_n_steps=STEPS))
        trainer = make_trainer(model, batches(rank=rank, world_size=2), checkpointer=manager)
        history = asyncio.run(trainer.train(STEPS))
        (Path(out_dir) / f"metrics_rank{rank}.json").write_text(json.dumps([dict(r) for r in history]))
        full = merged_state_dict(model)  # every rank joins the gather
        if rank == 0:
            torch.save(full, Path(out_dir) / "fsdp_params.pt")
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    mp.spawn(run, args=(sys.argv[1], int(sys.argv[2])), nprocs=2, join=True)
