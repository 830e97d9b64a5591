"""The same tiny-model GRPO step in Ludic and in TRL's ``GRPOTrainer``, on CPU, in one process.

Both sides start from the same weights (``ludic_train.testing.tiny_causal_lm``, seed 0, over
``bpe_tokenizer``), see the same prompts (``--prompts`` fixed questions rendered through the tokenizer's
ChatML template, so both sides feed the model the same token ids; the JSON says whether they matched),
sample ``--group-size`` completions per prompt at temperature 1.0 (no top-k / top-p) with at most
``--max-new-tokens`` tokens, score each completion with the same deterministic function of its text
(the share of vowels), normalise advantages within each group (mean and std), and take one AdamW step
(same lr, weight decay, betas, eps, grad-norm clip 1.0) on the token-level clipped surrogate with the
band ``[1 - 0.2, 1 + 0.27]`` and no KL term:

* ``ludic`` — ``ludic_train.Trainer.train_step`` with the ``grpo`` preset: a ``RolloutBatchSource`` over a
  ``RolloutEngine`` (a one-step env whose reward is the scoring function, an ``Agent`` with a pass-through
  parser, ``GRPORequestStrategy``) sampling in-process from the trainer's own model through
  ``LocalPolicyClient`` (all completions of a step decoded as one batch), then one micro-batch
  forward/backward with the sampler's logprobs as the old policy. The generation/train split is the
  trainer's own ``perf/batch_wait_s`` / ``perf/train_s``; ``decode_s`` is the client's decode loop
  alone (the client samples row by row, each request with its own seeded generator).
* ``trl`` — ``trl.GRPOTrainer`` with ``num_generations = group size``, one optimizer step per
  ``prompts × group size`` completions, ``beta=0`` (no reference model), ``num_iterations=1`` (no
  extra old-logprob forward pass either: the old policy is the detached current one),
  ``loss_type="dr_grpo"`` (sum over tokens, like Ludic's default; it differs from Ludic only by a
  constant factor), fp32 and no gradient checkpointing (TRL's defaults are bf16 and checkpointing on;
  Ludic's are off), HF ``generate`` for sampling. Steps are timed from ``on_step_begin`` to
  ``on_step_end``; the generation share is timed around TRL's ``_generate_and_score_completions``
  (sampling, reward, advantages), the rest is train.

The two sides alternate step by step in one process (TRL's step, then Ludic's, run from TRL's
``on_step_end``), so that load from other jobs on the machine falls on both alike. Each side runs
``--warmup`` untimed steps, then ``--steps`` timed ones; the JSON reports the median seconds per step of
each side, their ratio (ludic / TRL), the medians of the generation and train parts, the mean
completion length on each side (random tiny models rarely emit EOS, so both should be close to
``--max-new-tokens``), the settings and the library versions. The ratio is what matters: the machines
are shared and absolute times drift. Nothing reaches the network: the hub and telemetry are switched off
before anything is imported.
"""

from __future__ import annotations

import os

from _machine import emit, machine_facts

# Before transformers / datasets / trl are imported: a hub lookup would hang for ~50 s here, and no
# tracker may start.
for _key, _value in {
    "HF_HUB_OFFLINE": "1",
    "HF_DATASETS_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "HF_HUB_DISABLE_TELEMETRY": "1",
    "WANDB_MODE": "offline",
    "WANDB_DISABLED": "true",
    "TOKENIZERS_PARALLELISM": "false",
}.items():
    os.environ.setdefault(_key, _value)

import argparse  # noqa: E402
import asyncio  # noqa: E402
import contextlib  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable, Sequence  # noqa: E402
from importlib.metadata import version  # noqa: E402
from typing import Any  # noqa: E402

import attrs  # noqa: E402
import torch  # noqa: E402

from ludic_agents.agent import Agent  # noqa: E402
from ludic_agents.context import FullDialog  # noqa: E402
from ludic_core import RolloutSettings  # noqa: E402
from ludic_core.algorithms import grpo  # noqa: E402
from ludic_core.algorithms.losses import ClippedSurrogate  # noqa: E402
from ludic_core.batch_sources import RolloutBatchSource  # noqa: E402
from ludic_core.engine import RolloutEngine  # noqa: E402
from ludic_core.env import SingleAgentEnv  # noqa: E402
from ludic_core.inference import InferenceSpec, ReturnSpec, SamplingParams  # noqa: E402
from ludic_core.parsing import ParseResult  # noqa: E402
from ludic_core.protocols.single_agent import SingleAgentProtocol  # noqa: E402
from ludic_core.requests import EnvSpec, ProtocolSpec, RolloutRequest  # noqa: E402
from ludic_core.saw import SAWBatch  # noqa: E402
from ludic_core.seeding import derive_seed  # noqa: E402
from ludic_core.strategies import GRPORequestStrategy  # noqa: E402
from ludic_core.types import Info, StepOutcome  # noqa: E402
from ludic_train.config import TrainerConfig  # noqa: E402
from ludic_train.local_client import LocalPolicyClient  # noqa: E402
from ludic_train.testing import bpe_tokenizer, tiny_causal_lm  # noqa: E402
from ludic_train.trainer import Trainer  # noqa: E402

# In the tokenizer's training distribution, so prompts are a few dozen tokens, not hundreds of bytes.
QUESTIONS = (
    "Natalia has 12 clips. She buys 30 more clips. How many clips does Natalia have now?",
    "Weng has 7 apples. She buys 25 more apples. How many apples does Weng have now?",
    "Betty has 41 books. She buys 3 more books. How many books does Betty have now?",
    "Julie has 18 marbles. She buys 64 more marbles. How many marbles does Julie have now?",
    "James has 9 stickers. She buys 52 more stickers. How many stickers does James have now?",
    "Mark has 33 pencils. She buys 11 more pencils. How many pencils does Mark have now?",
    "Albert has 26 cookies. She buys 47 more cookies. How many cookies does Albert have now?",
    "Ken has 58 cards. She buys 6 more cards. How many cards does Ken have now?",
)

# TRL gets exactly what Ludic runs with: GRPO's clip band from its spec, the optimiser from TrainerConfig's
# defaults (read here, not restated, so the comparison follows any change to either).
GRPO_SPEC = grpo()
assert isinstance(GRPO_SPEC.loss, ClippedSurrogate)
CLIP_EPS_LOW, CLIP_EPS_HIGH = GRPO_SPEC.loss.clip_eps_low, GRPO_SPEC.loss.clip_eps_high
_OPTIMISER_DEFAULTS = {f.name: f.default for f in attrs.fields(TrainerConfig)}
WEIGHT_DECAY, BETAS, ADAM_EPS, MAX_GRAD_NORM = (
    _OPTIMISER_DEFAULTS[name] for name in ("weight_decay", "betas", "eps", "max_grad_norm")
)


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def vowel_share(text: str) -> float:
    """The reward on both sides: deterministic in the completion text and spread out across samples of
    a random model, so group-normalised advantages are rarely all zero."""
    return sum(ch in "aeiouAEIOU" for ch in text) / max(len(text), 1)


# --- Ludic ----------------------------------------------------------------------------------------------


class ScoredReplyEnv(SingleAgentEnv):
    """One turn: show the question, score the reply with :func:`vowel_share`, end the episode."""

    def __init__(self, question: str) -> None:
        super().__init__()
        self.question = question

    def env_reset(self, *, seed: int | None = None) -> tuple[str, Info]:
        return self.question, {}

    def env_step(self, action: str) -> StepOutcome:
        return StepOutcome(obs="", reward=vowel_share(action), terminated=True)


def pass_through(text: str) -> ParseResult:
    # Every completion is a valid action worth 0: the env alone rewards, as TRL's reward function does.
    return ParseResult(action=text, reward=0.0)


class RecordingSource:
    """Forwards to a batch source and keeps the last batch, to check prompts and completion lengths."""

    def __init__(self, inner: RolloutBatchSource) -> None:
        self.inner = inner
        self.last: SAWBatch | None = None

    async def next_batch(self) -> SAWBatch:
        self.last = await self.inner.next_batch()
        return self.last

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def ludic_requests(
    questions: Sequence[str], *, group_size: int, max_new_tokens: int, seed: int
) -> Callable[[int], list[RolloutRequest]]:
    spec = InferenceSpec(
        sampling=SamplingParams(temperature=1.0, max_tokens=max_new_tokens),
        return_=ReturnSpec(return_chosen_logprobs=True),
    )

    def requests(step: int) -> list[RolloutRequest]:
        # Same prompts every step, as TRL's sampler cycles over the same small dataset.
        strategy = GRPORequestStrategy(group_size=group_size, seed=derive_seed(seed, "train", step))
        base = [
            RolloutRequest(
                env=EnvSpec("scored", kwargs={"question": q}), protocol=ProtocolSpec("agent"), inference=spec
            )
            for q in questions
        ]
        return strategy.expand(base)

    return requests


class LudicSide:
    """The Ludic wiring of ``examples/demo.py``: ``LocalPolicyClient`` on the trainer's own model,
    ``RolloutBatchSource`` → ``Trainer`` with the ``grpo`` preset and the client as publisher."""

    def __init__(self, args: argparse.Namespace, questions: Sequence[str]) -> None:
        tokenizer = bpe_tokenizer()
        model = tiny_causal_lm(tokenizer, seed=args.seed)
        n = len(questions) * args.group_size
        # The client's default collection window; max_batch_size lets one decode batch take the whole
        # step, as HF generate does on the TRL side (decode_batches_per_step in the JSON checks it).
        self.client = LocalPolicyClient(
            model, tokenizer, batch_window_s=args.batch_window_s, max_batch_size=n, seed=args.seed
        )

        def protocol() -> SingleAgentProtocol:
            agent = Agent(
                client=self.client,
                parser=pass_through,
                context=FullDialog(),
                # TRL scores completions cut at max_completion_length like any other; so must we.
                reject_incomplete_completions=False,
            )
            return SingleAgentProtocol(agent)

        engine = RolloutEngine(
            env_factories={"scored": ScoredReplyEnv},
            protocol_factories={"agent": protocol},
            base_seed=args.seed,
        )
        algorithm = GRPO_SPEC
        self.source = RecordingSource(
            RolloutBatchSource(
                engine=engine,
                credit_assigner=algorithm.credit_assigner,
                requests=ludic_requests(
                    questions, group_size=args.group_size, max_new_tokens=args.max_new_tokens, seed=args.seed
                ),
                settings=RolloutSettings(max_steps=1, concurrency=n),
            )
        )
        self.trainer = Trainer(
            model=model,
            algorithm=algorithm,
            batch_source=self.source,
            config=TrainerConfig(
                pad_token_id=tokenizer,
                device="cpu",
                lr=args.lr,
                weight_decay=WEIGHT_DECAY,
                betas=BETAS,
                eps=ADAM_EPS,
                max_grad_norm=MAX_GRAD_NORM,
                max_seq_len=1024,
                # The whole step in one forward/backward, as TRL does with one per-device batch.
                micro_token_budget=n * 1024,
            ),
            publisher=self.client.as_publisher(),
        )
        # One loop for every step: the client's worker and lock stay on the loop that made them.
        self.loop = asyncio.new_event_loop()
        self.times: list[float] = []
        self.generation: list[float] = []
        self.train: list[float] = []
        self.lengths: list[float] = []
        self.decode_batches: list[int] = []
        self.decode: list[float] = []
        self.prompts: list[tuple[int, ...]] = []

    def step(self) -> None:
        batches_before, decode_before = self.client.stats["batches"], self.client.stats["generate_s"]
        started = time.perf_counter()
        metrics = self.loop.run_until_complete(self.trainer.train_step())
        self.times.append(time.perf_counter() - started)
        self.generation.append(metrics["perf/batch_wait_s"])
        self.train.append(metrics["perf/train_s"])
        self.decode_batches.append(int(self.client.stats["batches"] - batches_before))
        self.decode.append(self.client.stats["generate_s"] - decode_before)
        batch = self.source.last
        assert batch is not None
        self.lengths.append(statistics.fmean(sum(item.action_mask) for item in batch.items))
        # The prompt is everything before the first action token.
        self.prompts = sorted(
            {tuple(i.input_ids[: list(i.action_mask).index(1)]) for i in batch.items if 1 in i.action_mask}
        )

    def close(self) -> None:
        self.loop.run_until_complete(self.client.aclose())
        self.loop.close()


def run(args: argparse.Namespace, questions: Sequence[str], workdir: str) -> dict[str, Any]:
    """Alternate the two sides step by step (TRL's step, then Ludic's, from TRL's ``on_step_end``), so
    that noise from other jobs on the machine falls on both alike."""
    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    ludic = LudicSide(args, questions)
    tokenizer = bpe_tokenizer()
    model = tiny_causal_lm(tokenizer, seed=args.seed)  # the same initial weights as Ludic's
    # Plain-text prompts already rendered through the chat template: TRL tokenizes them as they are,
    # giving the token ids Ludic's Agent renders from the same single user message (checked below).
    prompts = [
        tokenizer.apply_chat_template(
            [{"role": "user", "content": q}], tokenize=False, add_generation_prompt=True
        )
        for q in questions
    ]
    dataset = Dataset.from_dict({"prompt": prompts})

    # TRL's reward-function type allows None ("no score"); ours always scores.
    def reward(completions: list[str], **_: Any) -> list[float | None]:
        return [vowel_share(text) for text in completions]

    class Interleave(TrainerCallback):
        """Times each TRL optimizer step, then runs one Ludic step outside TRL's timed window."""

        def __init__(self) -> None:
            self.started = 0.0
            self.times: list[float] = []

        def on_step_begin(self, *_: Any, **__: Any) -> None:
            self.started = time.perf_counter()

        def on_step_end(self, *_: Any, **__: Any) -> None:
            self.times.append(time.perf_counter() - self.started)
            ludic.step()
            index = len(self.times) - 1
            log(
                f"step {index}{' (warm-up)' if index < args.warmup else ''}: trl {self.times[-1]:.3f} s, "
                f"ludic {ludic.times[-1]:.3f} s (rollouts {ludic.generation[-1]:.3f} s, "
                f"train {ludic.train[-1]:.3f} s)"
            )

    class TimedGRPOTrainer(GRPOTrainer):
        """Times TRL's generate-score-advantage phase (a private method, wrapped, not changed) and keeps
        its last prompt ids for the comparability check."""

        generation: list[float]
        last: dict[str, Any]

        def _generate_and_score_completions(self, inputs: Any) -> dict[str, Any]:
            started = time.perf_counter()
            out: dict[str, Any] = super()._generate_and_score_completions(inputs)
            self.generation.append(time.perf_counter() - started)
            self.last = out
            return out

    n = len(questions) * args.group_size
    config = GRPOConfig(
        output_dir=workdir,
        use_cpu=True,
        report_to="none",
        save_strategy="no",
        logging_steps=1,  # completion lengths come from the logs
        disable_tqdm=True,
        log_completions=False,
        seed=args.seed,
        max_steps=args.warmup + args.steps,
        per_device_train_batch_size=n,  # completions per optimizer step, like Ludic's batch
        gradient_accumulation_steps=1,
        num_generations=args.group_size,
        max_completion_length=args.max_new_tokens,
        temperature=1.0,
        top_p=1.0,
        top_k=0,
        beta=0.0,
        num_iterations=1,
        epsilon=CLIP_EPS_LOW,
        epsilon_high=CLIP_EPS_HIGH,
        loss_type="dr_grpo",
        scale_rewards="group",
        learning_rate=args.lr,
        lr_scheduler_type="constant",
        warmup_steps=0,
        optim="adamw_torch",
        weight_decay=WEIGHT_DECAY,
        adam_beta1=BETAS[0],
        adam_beta2=BETAS[1],
        adam_epsilon=ADAM_EPS,
        max_grad_norm=MAX_GRAD_NORM,
        bf16=False,  # TRL defaults to bf16 autocast; Ludic's tiny model trains in fp32
        gradient_checkpointing=False,  # TRL defaults to on; Ludic's TrainerConfig to off
        shuffle_dataset=False,
        use_vllm=False,
    )
    timer = Interleave()
    trainer = TimedGRPOTrainer(
        model=model,
        reward_funcs=reward,
        args=config,
        train_dataset=dataset,
        processing_class=tokenizer,
        callbacks=[timer],
    )
    trainer.generation = []
    trainer.last = {}
    try:
        trainer.train()
    finally:
        ludic.close()

    timed = slice(args.warmup, args.warmup + args.steps)
    trl_lengths = [
        e["completions/mean_length"] for e in trainer.state.log_history if "completions/mean_length" in e
    ]
    trl_times, trl_generation = timer.times[timed], trainer.generation[timed]
    last_ids, last_mask = trainer.last["prompt_ids"], trainer.last["prompt_mask"]
    trl_prompts = sorted(
        {tuple(ids[mask.bool()].tolist()) for ids, mask in zip(last_ids, last_mask, strict=True)}
    )
    return {
        "same_prompt_token_ids": trl_prompts == ludic.prompts,
        "ludic": {
            "seconds_per_step": statistics.median(ludic.times[timed]),
            "generation_s": statistics.median(ludic.generation[timed]),
            "train_s": statistics.median(ludic.train[timed]),
            # The model's decode loop alone; the rest of generation_s is the client's collection window,
            # the engine (envs, agents, prompt rendering) and credit assignment / SAW building.
            "decode_s": statistics.median(ludic.decode[timed]),
            "step_times": ludic.times[timed],
            "mean_completion_tokens": statistics.fmean(ludic.lengths[timed]),
            "completions_per_step": n,
            # 1 per step: all completions were sampled in one batch, as HF generate does on the TRL side.
            "decode_batches_per_step": max(ludic.decode_batches[timed]),
        },
        "trl": {
            "seconds_per_step": statistics.median(trl_times),
            "generation_s": statistics.median(trl_generation),
            "train_s": statistics.median(t - g for t, g in zip(trl_times, trl_generation, strict=True)),
            "step_times": trl_times,
            "mean_completion_tokens": statistics.fmean(trl_lengths[timed]) if trl_lengths else None,
            "completions_per_step": int(last_ids.shape[0]),
        },
        "torch_threads": torch.get_num_threads(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument(
        "--prompts", type=int, default=4, help=f"distinct prompts per step (<= {len(QUESTIONS)})"
    )
    parser.add_argument("--group-size", type=int, default=4, help="completions per prompt (GRPO group)")
    parser.add_argument("--max-new-tokens", type=int, default=24)
    parser.add_argument("--warmup", type=int, default=1, help="untimed steps per side")
    parser.add_argument("--steps", type=int, default=12, help="timed steps per side")
    parser.add_argument("--lr", type=float, default=1e-5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--batch-window-s",
        type=float,
        default=0.0,
        help="LocalPolicyClient collection window (its default)",
    )
    parser.add_argument("--threads", type=int, default=2, help="torch CPU threads for both sides")
    args = parser.parse_args()
    if not 1 <= args.prompts <= len(QUESTIONS):
        parser.error(f"--prompts must be in [1, {len(QUESTIONS)}]")
    if args.steps < 1 or args.warmup < 0:
        parser.error("--steps must be >= 1 and --warmup >= 0")
    torch.set_num_threads(args.threads)
    facts = machine_facts()
    questions = QUESTIONS[: args.prompts]

    # transformers' Trainer prints its logs on stdout; stdout must hold only the JSON result.
    started = time.perf_counter()
    with (
        contextlib.redirect_stdout(sys.stderr),
        tempfile.TemporaryDirectory(prefix="bench_grpo_trl_") as workdir,
    ):
        result = run(args, questions, workdir)
    log(f"both sides done in {time.perf_counter() - started:.1f} s")

    ludic, trl_side = result["ludic"], result["trl"]
    emit(
        {
            "benchmark": "grpo_step_vs_trl",
            "settings": {
                "model": "ludic_train.testing.tiny_causal_lm (qwen2, hidden 64, 2 layers), bpe_tokenizer",
                "prompts": args.prompts,
                "group_size": args.group_size,
                "completions_per_step": args.prompts * args.group_size,
                "max_new_tokens": args.max_new_tokens,
                "temperature": 1.0,
                "warmup_steps": args.warmup,
                "timed_steps": args.steps,
                "lr": args.lr,
                "clip_eps": [CLIP_EPS_LOW, CLIP_EPS_HIGH],
                "kl_beta": 0.0,
                "device": "cpu",
                "torch_threads": result["torch_threads"],
            },
            "same_prompt_token_ids": result["same_prompt_token_ids"],
            "seconds_per_step": {"ludic": ludic["seconds_per_step"], "trl": trl_side["seconds_per_step"]},
            "ratio_ludic_vs_trl": ludic["seconds_per_step"] / trl_side["seconds_per_step"],
            "ludic": ludic,
            "trl": trl_side,
            "versions": {
                name: version(name)
                for name in ("trl", "transformers", "torch", "accelerate", "datasets", "ludic-train")
            },
        },
        facts=facts,
        headline={
            "GRPO step, ludic (s)": round(ludic["seconds_per_step"], 3),
            "GRPO step, TRL (s)": round(trl_side["seconds_per_step"], 3),
            "ludic / TRL": round(ludic["seconds_per_step"] / trl_side["seconds_per_step"], 2),
        },
    )


if __name__ == "__main__":
    main()
