"""CPU learning test for SPO (``spo`` + ``SPORequests`` + one shared ``SPOValueTracker``): a tiny
random model raises its mean reward on the toy digits task asked through several distinct prompts, one
sample per prompt per step; the same run with every weight zeroed (the tracker and the prompt sampling
unchanged) does not.

Set up as ``test_learning.py`` (same tiny model, tokenizer, learning rate, steps and windows; marked
``slow`` and run in CI): ``SPORequests`` draws ``BATCH`` of the ``POOL`` prompts each step by the
tracker's priority, ``LocalPolicyClient`` answers each once (four tokens, temperature 1.0), and
``SPOAdvantage`` baselines each answer with its prompt's estimate before folding the reward in.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any

import attrs
import pytest
from toy_rl import CompletionIsActionAgent, DigitsEnv, any_text_parser

from ludic_core import RolloutSettings
from ludic_core.algorithms import AlgorithmSpec, spo
from ludic_core.batch_sources import RolloutBatchSource
from ludic_core.credit import CreditAssigner, RolloutStepKey
from ludic_core.engine import RolloutEngine
from ludic_core.inference import InferenceSpec, ReturnSpec, SamplingParams
from ludic_core.protocols.single_agent import SingleAgentProtocol
from ludic_core.requests import EnvSpec, ProtocolSpec, RolloutRequest
from ludic_core.spo import SPOAdvantage, SPORequests, SPOValueTracker
from ludic_core.types import Info, Rollout
from ludic_train.config import TrainerConfig
from ludic_train.local_client import LocalPolicyClient
from ludic_train.losses import TokenClippedSurrogateLoss, build_loss
from ludic_train.testing import bpe_tokenizer, tiny_causal_lm
from ludic_train.trainer import Trainer

STEPS = 20
WINDOW = 5
POOL = 48  # distinct prompts
BATCH = 32  # prompts per step, one sample each: the 32 samples per step of test_learning.py's GRPO runs
MAX_TOKENS = 4
LR = 1e-2
SEED = 0

# Mean reward of the last 5 steps minus the first 5, measured with pytest on 2 CPU cores (seed 0):
#   spo                     0.423 -> 0.987 (+0.56)
#   zero weights (control)  0.382 -> 0.401 (+0.02)
# Over seeds 1-3 SPO gained +0.54 to +0.55 and the zero-weight control +0.03 to +0.04; the margin of
# test_learning.py, 0.2, sits well inside that gap on both sides. Each run takes about 4 s.
MARGIN = 0.2


class PromptedDigitsEnv(DigitsEnv):
    """``DigitsEnv`` asked through one of many prompts, so the tracker has distinct prompts to track."""

    def __init__(self, *, prompt: str) -> None:
        super().__init__()
        self._prompt = prompt

    def env_reset(self, *, seed: int | None = None) -> tuple[str, Info]:
        return self._prompt, {}


@attrs.frozen
class ZeroedCredit:
    """The inner assigner runs (so the tracker and the prompt sampling evolve as in a real run), but
    every weight is 0: no learning signal."""

    inner: CreditAssigner

    def compute(self, rollouts: Sequence[Rollout]) -> dict[RolloutStepKey, float]:
        return dict.fromkeys(self.inner.compute(rollouts), 0.0)


def _source(
    tok: Any, client: LocalPolicyClient, algorithm: AlgorithmSpec, tracker: SPOValueTracker
) -> RolloutBatchSource:
    spec = InferenceSpec(
        sampling=SamplingParams(temperature=1.0, max_tokens=MAX_TOKENS), return_=ReturnSpec.for_rl()
    )

    def protocol() -> SingleAgentProtocol:
        agent = CompletionIsActionAgent(
            client,
            parser=any_text_parser,
            encode=lambda s: tok.encode(s, add_special_tokens=False),
            inference=spec,
            incomplete_completion_penalty=0.0,
        )
        return SingleAgentProtocol(agent)

    def build(prompt: str, index: int) -> RolloutRequest:
        return RolloutRequest(
            env=EnvSpec("prompted_digits", kwargs={"prompt": prompt}),
            protocol=ProtocolSpec("agent"),
            inference=spec,
        )

    prompts = [f"Question {i}: say a number." for i in range(POOL)]
    return RolloutBatchSource(
        engine=RolloutEngine(
            env_factories={"prompted_digits": PromptedDigitsEnv},
            protocol_factories={"agent": protocol},
            base_seed=SEED,
        ),
        credit_assigner=algorithm.credit_assigner,
        requests=SPORequests(samples=prompts, build=build, batch_size=BATCH, tracker=tracker, seed=SEED),
        settings=RolloutSettings(max_steps=1, concurrency=64),
    )


async def _train(zero_weights: bool) -> tuple[list[float], SPOValueTracker]:
    tok = bpe_tokenizer()
    model = tiny_causal_lm(tok, seed=SEED)
    tracker = SPOValueTracker()
    algorithm = spo(tracker=tracker)
    if zero_weights:
        algorithm = attrs.evolve(algorithm, credit_assigner=ZeroedCredit(algorithm.credit_assigner))
    client = LocalPolicyClient(model, tok, batch_window_s=0.02, max_batch_size=256)
    trainer = Trainer(
        model=model,
        algorithm=algorithm,
        batch_source=_source(tok, client, algorithm, tracker),
        config=TrainerConfig(pad_token_id=tok, device="cpu", lr=LR, max_seq_len=128, micro_token_budget=4096),
        publisher=client.as_publisher(),
    )
    try:
        results = await trainer.train(STEPS)
    finally:
        await client.aclose()
    assert client.policy_version == STEPS
    return [r["train/avg_total_reward"] for r in results], tracker


def _windows(rewards: list[float]) -> tuple[float, float]:
    assert len(rewards) == STEPS
    return statistics.mean(rewards[:WINDOW]), statistics.mean(rewards[-WINDOW:])


def test_make_spo_shares_the_tracker_and_uses_the_ppo_clip() -> None:
    tracker = SPOValueTracker()
    algorithm = spo(tracker=tracker, reward_min=-0.5)
    assert isinstance(algorithm.credit_assigner, SPOAdvantage)
    assert algorithm.credit_assigner.tracker is tracker and algorithm.credit_assigner.reward_min == -0.5
    assert build_loss(algorithm.loss) == TokenClippedSurrogateLoss(clip_eps_low=0.2, clip_eps_high=0.2)
    assert algorithm.name == "spo" and algorithm.preprocess is None
    assert "actor_logps" in algorithm.required_inputs


@pytest.mark.slow
async def test_spo_raises_reward() -> None:
    rewards, tracker = await _train(zero_weights=False)
    before, after = _windows(rewards)
    print(f"spo: mean reward {before:.3f} -> {after:.3f}")
    assert after - before >= MARGIN, (
        f"spo: mean reward {before:.3f} -> {after:.3f} (need +{MARGIN}): {[round(r, 3) for r in rewards]}"
    )
    # Every drawn prompt was tracked, and the estimates followed the rising reward.
    assert len(tracker) == POOL
    assert statistics.mean(tracker.estimate(str(i)) for i in range(POOL)) > 0.5


@pytest.mark.slow
async def test_spo_with_zero_weights_does_not_meet_margin() -> None:
    rewards, _ = await _train(zero_weights=True)
    before, after = _windows(rewards)
    print(f"spo zero weights: mean reward {before:.3f} -> {after:.3f}")
    assert after - before < MARGIN, (
        f"zero weights moved the mean reward {before:.3f} -> {after:.3f}: {[round(r, 3) for r in rewards]}"
    )
