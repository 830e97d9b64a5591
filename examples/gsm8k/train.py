r"""The GSM8K example's data, request and evaluation helpers, and the ``--backend tinker`` entry.

Local and vLLM-sampled training are ``ludic train`` recipes (see README.md):

    ludic train gsm8k-grpo examples/gsm8k/grpo.toml            # in-process sampling
    ludic train gsm8k-grpo-vllm examples/gsm8k/grpo_vllm.toml  # a vLLM server samples

This module remains for ``train_tinker.py`` (which imports these helpers) and for
``python examples/gsm8k/train.py --backend tinker ...``, which runs it. Each episode is one question;
the agent must put its final answer in ``\boxed{}``; the env checks it numerically against the row's
``#### <number>``. An answer without a box is a parse error (-1, episode over) and counts as wrong.
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
    """``train.py``'s command line: ``(main, args)`` of ``train_tinker.py``. Only ``--backend tinker``
    is accepted here: local and vLLM-sampled training are the ``gsm8k-grpo`` / ``gsm8k-grpo-vllm``
    recipes of ``ludic train``."""
    probe = argparse.ArgumentParser(add_help=False)
    probe.add_argument("--backend", default="local")
    backend = probe.parse_known_args(argv)[0].backend
    if backend != "tinker":
        raise SystemExit(
            f"--backend {backend}: train with `ludic train gsm8k-grpo examples/gsm8k/grpo.toml` (in-process) "
            "or `ludic train gsm8k-grpo-vllm examples/gsm8k/grpo_vllm.toml` (vLLM); see examples/gsm8k/README.md"
        )
    train_tinker = _load_sibling("train_tinker")
    return train_tinker.main, train_tinker.parse_args(argv)


if __name__ == "__main__":
    run, cli_args = cli(sys.argv[1:])
    asyncio.run(run(cli_args))
