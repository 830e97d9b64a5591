"""GRPO + LoRA on Tic-Tac-Toe on the Tinker service: no local GPU, no local model.

The same game, agent, rewards and requests as ``train.py`` (from ``common.py``). Sampling goes through
``TinkerChatClient``; ``TinkerTrainer`` sends every batch to Tinker (``forward_backward`` with the
built-in ``ppo`` loss at the ``ludic_core.algorithms.grpo`` preset's clip band, then ``optim_step``) and hands the new
weights to the sampler after every step, so rollouts carry the step that produced their weights.

    export TINKER_API_KEY=tml-...
    python examples/tic_tac_toe/train_tinker.py --base-model Qwen/Qwen3-4B-Instruct-2507 --train-steps 20
    python examples/tic_tac_toe/train.py --backend tinker ...          # the same
    python examples/tic_tac_toe/train_tinker.py --resume tinker://RUN/weights/tictactoe-...  # a saved one

``--base-url`` points at another Tinker deployment (default: ``TINKER_BASE_URL`` or production). The
tokenizer (chat template included) is the base model's, from the Hugging Face Hub or its cache, unless
``--tokenizer`` names a local tokenizer directory (or another hub name). ``--fake-service`` dry-runs
the recipe offline against ``ludic_tinker.testing``'s loopback fake service (no key, network or Hub)::

    python examples/tic_tac_toe/train_tinker.py --fake-service --train-steps 2 --group-size 2 \
        --rollouts-per-update 4 --max-completion-tokens 16 --eval-episodes 4 --eval-every 2
``--checkpoint-every N`` saves weights and Adam state on the service; ``--resume PATH`` continues one.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from pathlib import Path
from typing import Any

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # examples/tinker_common.py
from tinker_common import (
    SHOWN_KEYS,
    ServiceWiring,
    add_service_arguments,
    check_service_args,
    open_service,
)

sys.path.insert(0, str(Path(__file__).resolve().parent))


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description="GRPO + LoRA on Tic-Tac-Toe on Tinker",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("--backend", default="tinker", choices=["tinker"], help="accepted for train.py's CLI")
    add_service_arguments(p)  # --base-model, --base-url, --tokenizer, --fake-service
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--train-steps", type=int, default=30)
    p.add_argument("--group-size", type=int, default=8)
    p.add_argument(
        "--rollouts-per-update", type=int, default=32, help="episodes per step (a multiple of --group-size)"
    )
    p.add_argument("--max-steps-per-episode", type=int, default=5)
    p.add_argument("--agent-starts-as", default="x", choices=["x", "o", "mixed"])
    p.add_argument("--opponent", default="random", choices=["random", "minimax", "mixed"])
    p.add_argument("--lora-rank", type=int, default=32)
    p.add_argument("--lr", type=float, default=4e-5)
    p.add_argument("--positive-only", action="store_true", help="clamp advantages at 0")
    p.add_argument(
        "--train-temperature",
        type=float,
        default=1.0,
        help="keep 1.0: Tinker's logprobs are untempered (the ppo ratio needs the sampling policy's)",
    )
    p.add_argument("--max-completion-tokens", type=int, default=64)
    p.add_argument("--eval-every", type=int, default=10, help="0: no evals")
    p.add_argument("--eval-before-start", action="store_true")
    p.add_argument("--eval-episodes", type=int, default=100)
    p.add_argument("--eval-temperature", type=float, default=0.6)
    p.add_argument("--checkpoint-every", type=int, default=0, help="0: no checkpoints")
    p.add_argument("--resume", default=None, help="a tinker:// checkpoint path from --checkpoint-every")
    p.add_argument("--metrics", type=Path, default=Path("runs/tictactoe-tinker/metrics.jsonl"))
    p.add_argument("--timeout-s", type=float, default=900.0, help="per Tinker call")
    return p.parse_args(argv)


def _check_args(args: argparse.Namespace) -> None:
    if args.group_size < 2:
        raise SystemExit(f"--group-size must be >= 2 (GRPO compares samples), got {args.group_size}")
    if args.rollouts_per_update % args.group_size:
        raise SystemExit(
            f"--rollouts-per-update {args.rollouts_per_update} is not a multiple of --group-size {args.group_size}"
        )
    if args.train_steps < 1:
        raise SystemExit(f"--train-steps must be >= 1, got {args.train_steps}")
    check_service_args(args)


async def main(
    args: argparse.Namespace,
    *,
    api_key: str | None = None,
    tokenizer: Any = None,
    chat_template: Any = None,
) -> list[dict[str, float]]:
    """Train; returns each step's metrics. ``tokenizer`` / ``chat_template`` default to
    ``--tokenizer``'s, or the base model's (``training_client.get_tokenizer()``); with
    ``--fake-service``, the fake's byte tokenizer and plain-text template."""
    _check_args(args)
    with open_service(args, api_key=api_key, tokenizer=tokenizer, chat_template=chat_template) as wiring:
        return await _train(args, wiring)


async def _train(args: argparse.Namespace, wiring: ServiceWiring) -> list[dict[str, float]]:
    from common import eval_requests, grpo_requests, make_engine, outcome_reducers, rollout_settings

    from ludic_core import JsonlLogger, PrintLogger, TeeLogger
    from ludic_core.algorithms import grpo
    from ludic_core.batch_sources import RolloutBatchSource
    from ludic_core.evaluation import run_eval
    from ludic_tinker import (
        AdamConfig,
        TinkerChatClient,
        TinkerCheckpoint,
        TinkerTimeouts,
        TinkerTrainer,
        TinkerTrainerConfig,
        connect,
        create_training_client,
        create_training_client_from_checkpoint,
    )

    timeouts = TinkerTimeouts(train_s=args.timeout_s, sample_s=args.timeout_s, save_s=args.timeout_s)
    config = TinkerTrainerConfig(
        adam=AdamConfig(learning_rate=args.lr),
        sampler_every=1,
        checkpoint_every=args.checkpoint_every or None,
        checkpoint_prefix="tictactoe",
        timeouts=timeouts,
    )
    service = connect(base_url=wiring.base_url, api_key=wiring.api_key, timeouts=timeouts)
    if args.resume is None:
        start_step = 0
        training_client = await create_training_client(
            service, args.base_model, rank=args.lora_rank, seed=args.seed, timeouts=timeouts
        )
    else:
        checkpoint = TinkerCheckpoint.from_path(args.resume)  # the step is in the checkpoint's name
        start_step = checkpoint.step
        training_client = await create_training_client_from_checkpoint(
            service, checkpoint.path, timeouts=timeouts
        )
    tokenizer = await wiring.tokenizer_for(training_client)
    # The first sampler comes from the trainer (its weights at its step) when training starts.
    client = TinkerChatClient(None, tokenizer, timeout_s=args.timeout_s)

    mark = {"x": "X", "o": "O", "mixed": "random"}[args.agent_starts_as]
    engine = make_engine(
        client, opponent=args.opponent, agent_mark=mark, seed=args.seed, chat_template=wiring.chat_template
    )
    # The same GRPO spec the local Trainer takes: its credit here, its clip band as Tinker's ppo loss.
    algorithm = grpo(group_size=args.group_size, positive_only=args.positive_only)
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
    # The same loggers as the local Trainer's: a JSON line per step or eval, a console line.
    logger = TeeLogger(JsonlLogger(args.metrics), PrintLogger(prefix="[tinker]", keys=SHOWN_KEYS))
    trainer = TinkerTrainer.from_algorithm(
        training_client,
        source,
        algorithm,
        config=config,
        chat_client=client,
        start_step=start_step,
        logger=logger,
    )
    evals = eval_requests(
        episodes=args.eval_episodes,
        temperature=args.eval_temperature,
        max_tokens=args.max_completion_tokens,
        seed=args.seed,
    )

    async def evaluate() -> None:
        if trainer.sampler_version != trainer.step:
            await trainer.refresh_sampler()
        result = await run_eval(
            engine, evals, outcome_reducers(), rollout_settings(args.max_steps_per_episode)
        )
        logger.log(trainer.step, {f"eval/{k}": float(v) for k, v in result.metrics.items() if v is not None})

    results: list[dict[str, float]] = []
    try:
        if args.eval_before_start and args.eval_episodes:
            await evaluate()
        while trainer.step < args.train_steps:
            chunk = args.train_steps - trainer.step
            if args.eval_every:
                chunk = min(chunk, args.eval_every - trainer.step % args.eval_every)
            for result in await trainer.train(chunk):
                results.append({"step": result["train/step"], "loss": result["train/loss"], **result})
            if args.eval_every and args.eval_episodes and trainer.step % args.eval_every == 0:
                await evaluate()
    finally:
        await trainer.aclose()
    return results


if __name__ == "__main__":
    asyncio.run(main(parse_args()))
