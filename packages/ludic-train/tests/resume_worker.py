"""Subprocess for the resume test: trains the toy GRPO run, checkpointing every step.

Usage: ``python resume_worker.py CKPT_DIR LOG_PATH NUM_STEPS [--resume]``. After each step it appends
``{"step", "loss", "grad_norm", "reward", "param_sum"}`` to LOG_PATH (after the step's checkpoint is
on disk), so the parent can kill it at any moment and compare a resumed run with an uninterrupted one.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).parent))

import torch
from toy_rl import make_online_source

from ludic_core.algorithms import reinforce
from ludic_train.checkpoint import CheckpointConfig, CheckpointManager
from ludic_train.config import TrainerConfig
from ludic_train.local_client import LocalPolicyClient
from ludic_train.testing import bpe_tokenizer, tiny_causal_lm
from ludic_train.trainer import Trainer


async def main(ckpt_dir: str, log_path: str, num_steps: int, resume: bool) -> None:
    torch.set_num_threads(1)
    tok = bpe_tokenizer()
    model = tiny_causal_lm(tok, seed=0)
    # A long batch window and a large max batch: every step's requests decode as one batch, so the
    # sampled tokens do not depend on scheduling.
    client = LocalPolicyClient(model, tok, batch_window_s=0.05, max_batch_size=1024)
    algorithm = reinforce()
    source = make_online_source(tok, client, algorithm, group_size=4, groups_per_step=4, max_tokens=6, seed=3)
    trainer = Trainer(
        model=model,
        algorithm=algorithm,
        batch_source=source,
        config=TrainerConfig(
            pad_token_id=tok, device="cpu", lr=1e-3, max_seq_len=128, micro_token_budget=512
        ),
        publisher=client.as_publisher(),
        checkpointer=CheckpointManager(CheckpointConfig(ckpt_dir, every_n_steps=1, max_to_keep=3)),
        resume_from="latest" if resume else None,
    )
    client.set_policy_version(trainer.step)
    with open(log_path, "a", encoding="utf-8") as log:  # noqa: ASYNC230 (a test worker; blocking is fine)
        while trainer.step < num_steps:
            m = await trainer.train_step()
            param_sum = float(sum(p.detach().double().sum() for p in model.parameters()))
            record = {
                "step": trainer.step,
                "loss": m["train/loss"],
                "grad_norm": m["train/grad_norm"],
                "reward": m["train/avg_total_reward"],
                "param_sum": param_sum,
            }
            log.write(json.dumps(record) + "\n")
            log.flush()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3]), "--resume" in sys.argv[4:]))
