r"""GRPO / GSPO + LoRA on GSM8K on the Tinker service: no local GPU, no local model.

The same data, env, ``\boxed{}`` agent, requests and evaluation metrics as ``train.py`` (its helpers
are imported, not copied). Sampling goes through ``TinkerChatClient``; ``TinkerTrainer`` sends every
batch to Tinker (``forward_backward`` with a built-in loss, then ``optim_step``) and hands the new
weights to the sampler after every step, so rollouts carry the step that produced their weights.

* ``--algorithm grpo`` — the ``ludic_core.algorithms.grpo`` preset, the same spec ``train.py`` trains
  locally: group-normalised advantages and Tinker's ``ppo`` loss at the preset's clip band.
* ``--algorithm gspo`` — the ``gspo`` preset: Tinker's ``gspo`` loss at its band, length-normalised;
  needs a tinker SDK that has it (0.34 or newer), else a clear error at start.

    export TINKER_API_KEY=tml-...
    python examples/gsm8k/train_tinker.py --base-model Qwen/Qwen3-4B-Instruct-2507 --train-steps 20
    python examples/gsm8k/train.py --backend tinker ...                    # the same
    python examples/gsm8k/train_tinker.py --resume tinker://RUN/weights/gsm8k-...  # a saved one

``--base-url`` points at another Tinker deployment (default: ``TINKER_BASE_URL`` or production). The
tokenizer (chat template included) is the base model's, from the Hugging Face Hub or its cache, unless
``--tokenizer`` names a local tokenizer directory (or another hub name). ``--fake-service`` dry-runs
the recipe offline against ``ludic_tinker.testing``'s loopback fake service (no key, network or Hub)::

    python examples/gsm8k/train_tinker.py --fake-service --data-dir DIR --limit 8 --train-steps 2 \
        --group-size 2 --rollouts-per-update 4 --max-completion-tokens 16 --eval-limit 4 --eval-every 2
``--checkpoint-every N`` saves weights and Adam state on the service; ``--resume PATH`` continues one
(training questions continue where that step left off: requests are a pure function of the step).
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import os
import sys
from pathlib import Path
from types import ModuleType
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

from ludic_core import RolloutSettings

_TRAIN_MODULE = "ludic_examples_gsm8k_train"


def gsm8k_train() -> ModuleType:
    """``train.py`` (its data, request and eval helpers), loaded under a name of its own so it never
    collides with another example's ``train`` module in the same process."""
    module = sys.modules.get(_TRAIN_MODULE)
    if module is None:
        spec = importlib.util.spec_from_file_location(
            _TRAIN_MODULE, Path(__file__).resolve().parent / "train.py"
        )
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[_TRAIN_MODULE] = module
        spec.loader.exec_module(module)
    return module


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    common = gsm8k_train()
    p = argparse.ArgumentParser(
        description="GRPO / GSPO + LoRA on GSM8K on Tinker",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("--backend", default="tinker", choices=["tinker"], help="accepted for train.py's CLI")
    add_service_arguments(p)  # --base-model, --base-url, --tokenizer, --fake-service
    p.add_argument("--algorithm", default="grpo", choices=["grpo", "gspo"])
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--data-dir",
        type=Path,
        default=common.default_data_dir(),
        help="folder with train.jsonl and test.jsonl; unset: the openai/gsm8k hub dataset",
    )
    p.add_argument("--split", default="train", help="training split")
    p.add_argument("--eval-split", default="test")
    p.add_argument("--limit", type=int, default=None, help="use only the first N training rows")
    p.add_argument("--train-steps", type=int, default=20)
    p.add_argument("--group-size", type=int, default=8)
    p.add_argument(
        "--rollouts-per-update", type=int, default=64, help="answers per step (a multiple of --group-size)"
    )
    p.add_argument("--max-completion-tokens", type=int, default=512)
    p.add_argument("--system-prompt", default=common.SYSTEM_PROMPT)
    p.add_argument(
        "--train-temperature",
        type=float,
        default=1.0,
        help="keep 1.0: Tinker's logprobs are untempered (the loss ratio needs the sampling policy's)",
    )
    p.add_argument("--lora-rank", type=int, default=32)
    p.add_argument("--lr", type=float, default=4e-5)
    p.add_argument("--positive-only", action="store_true", help="clamp advantages at 0")
    p.add_argument("--concurrency", type=int, default=64)
    p.add_argument("--eval-every", type=int, default=10, help="0: only --eval-before-start")
    p.add_argument("--eval-before-start", action="store_true")
    p.add_argument("--eval-limit", type=int, default=1000, help="test rows per evaluation")
    p.add_argument("--eval-group-size", type=int, default=1, help="answers per test question; >1 adds pass@k")
    p.add_argument("--eval-temperature", type=float, default=0.0)
    p.add_argument("--checkpoint-every", type=int, default=0, help="0: no checkpoints")
    p.add_argument("--resume", default=None, help="a tinker:// checkpoint path from --checkpoint-every")
    p.add_argument("--rollout-log", type=Path, default=None, help="JSONL of every training rollout")
    p.add_argument("--metrics", type=Path, default=Path("runs/gsm8k-tinker/metrics.jsonl"))
    p.add_argument("--timeout-s", type=float, default=900.0, help="per Tinker call")
    return p.parse_args(argv)


def check_args(args: argparse.Namespace) -> None:
    gsm8k_train().check_args(args)
    check_service_args(args)
    if args.group_size < 2:
        raise SystemExit(f"--group-size must be >= 2 (GRPO/GSPO compare answers), got {args.group_size}")
    if args.train_steps < 1:
        raise SystemExit(f"--train-steps must be >= 1, got {args.train_steps}")


def algorithm_spec(args: argparse.Namespace) -> Any:
    """The ``ludic_core.algorithms`` preset for ``--algorithm`` (the spec ``train.py`` trains locally)."""
    from ludic_core.algorithms import grpo, gspo

    presets = {"grpo": grpo, "gspo": gspo}
    if args.algorithm not in presets:
        raise SystemExit(f"--algorithm must be grpo or gspo, got {args.algorithm!r}")
    return presets[args.algorithm](group_size=args.group_size, positive_only=args.positive_only)


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
    from ludic_tinker import tinker_loss_for

    check_args(args)
    algorithm = algorithm_spec(args)
    # Before any remote call: a loss the installed SDK lacks (gspo before 0.34) fails fast, by name.
    tinker_loss_for(algorithm)
    with open_service(args, api_key=api_key, tokenizer=tokenizer, chat_template=chat_template) as wiring:
        return await _train(args, wiring, algorithm)


async def _train(args: argparse.Namespace, wiring: ServiceWiring, algorithm: Any) -> list[dict[str, float]]:
    common = gsm8k_train()
    from ludic_core import JsonlLogger, PrintLogger, TeeLogger
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

    train_rows = common.load_split(args, args.split, args.limit)
    test_rows = common.load_split(args, args.eval_split, args.eval_limit)

    timeouts = TinkerTimeouts(train_s=args.timeout_s, sample_s=args.timeout_s, save_s=args.timeout_s)
    config = TinkerTrainerConfig(
        adam=AdamConfig(learning_rate=args.lr),
        sampler_every=1,
        checkpoint_every=args.checkpoint_every or None,
        checkpoint_prefix="gsm8k",
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

    engine = common.make_engine(
        client,
        system_prompt=args.system_prompt,
        seed=args.seed,
        rollout_log=args.rollout_log,
        chat_template=wiring.chat_template,  # None: the Agent's HFChatTemplate over the client's tokenizer
    )
    # The preset's credit: advantages normalised within each question's group.
    source = RolloutBatchSource(
        engine=engine,
        credit_assigner=algorithm.credit_assigner,
        requests=common.train_requests(args, train_rows),
        settings=RolloutSettings(max_steps=1, concurrency=args.concurrency),
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
    evals = common.eval_requests(args, test_rows)
    reducers = common.eval_reducers(args.eval_group_size)

    async def evaluate() -> None:
        if trainer.sampler_version != trainer.step:
            await trainer.refresh_sampler()
        result = await run_eval(
            engine, evals, reducers, RolloutSettings(max_steps=1, concurrency=args.concurrency)
        )
        logger.log(trainer.step, {f"eval/{k}": float(v) for k, v in result.metrics.items() if v is not None})

    results: list[dict[str, float]] = []
    try:
        if args.eval_before_start:
            await evaluate()
        while trainer.step < args.train_steps:
            chunk = args.train_steps - trainer.step
            if args.eval_every:
                chunk = min(chunk, args.eval_every - trainer.step % args.eval_every)
            for result in await trainer.train(chunk):
                results.append({"step": result["train/step"], "loss": result["train/loss"], **result})
            if args.eval_every and trainer.step % args.eval_every == 0:
                await evaluate()
    finally:
        await trainer.aclose()
    return results


if __name__ == "__main__":
    asyncio.run(main(parse_args()))
