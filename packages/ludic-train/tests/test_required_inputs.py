"""Rollouts sampled without what the loss needs fail on the first batch, naming the loss and the fix."""

from __future__ import annotations

import random
import re

import pytest
import torch

from ludic_core import RolloutSettings
from ludic_core.algorithms import AlgorithmSpec, Term, cispo, grpo, gspo, reinforce, with_truncated_is
from ludic_core.batch_sources import RolloutBatchSource
from ludic_core.credit import CreditAssigner, GroupNormalizedReturn
from ludic_core.engine import RolloutEngine
from ludic_core.errors import DataError
from ludic_core.inference import InferenceSpec, ReturnSpec
from ludic_core.protocols import SingleAgentProtocol
from ludic_core.requests import EnvSpec, ProtocolSpec, RolloutRequest
from ludic_core.saw import SAWBatch, SAWItem
from ludic_core.strategies import GRPORequestStrategy
from ludic_core.testing import GuessNumberEnv, ScriptedAgent, SeededChatClient
from ludic_train.algorithm import TorchAlgorithm
from ludic_train.config import TrainerConfig
from ludic_train.losses import CompositeLoss, EntropyBonus, ReinforceLoss, build_loss
from ludic_train.testing import bpe_tokenizer, tiny_causal_lm
from ludic_train.trainer import Trainer


def rollout_source(inference: InferenceSpec, credit_assigner: CreditAssigner) -> RolloutBatchSource:
    client = SeededChatClient([str(n) for n in range(1, 6)])
    engine = RolloutEngine(
        env_factories={"guess": GuessNumberEnv},
        protocol_factories={"single": lambda: SingleAgentProtocol(ScriptedAgent(client))},
    )
    request = RolloutRequest(EnvSpec("guess", {"max_number": 5}), ProtocolSpec("single"), inference=inference)
    return RolloutBatchSource(
        engine=engine,
        credit_assigner=credit_assigner,
        requests=lambda step: GRPORequestStrategy(2, seed=step).expand([request] * 2),
        settings=RolloutSettings(max_steps=3),
    )


def trainer(algorithm: AlgorithmSpec, inference: InferenceSpec) -> Trainer:
    return Trainer(
        model=tiny_causal_lm(bpe_tokenizer(), seed=1),
        algorithm=algorithm,
        batch_source=rollout_source(inference, algorithm.credit_assigner),
        config=TrainerConfig(pad_token_id=0, device="cpu", max_seq_len=256, publish_every_steps=0),
    )


@pytest.mark.parametrize(
    ("algorithm", "loss_name"),
    [
        (grpo(group_size=2), "TokenClippedSurrogateLoss"),
        (cispo(group_size=2), "CISPOLoss"),
        (gspo(group_size=2), "SequenceClippedSurrogateLoss"),
        (with_truncated_is(reinforce()), "TruncatedISCorrection(ReinforceLoss)"),
    ],
    ids=["grpo", "cispo", "gspo", "reinforce-tis"],
)
def test_rollouts_without_chosen_logprobs_fail_on_the_first_batch_with_the_fix(
    algorithm: AlgorithmSpec, loss_name: str
) -> None:
    run = trainer(algorithm, InferenceSpec())  # the default ReturnSpec asks for no logprobs
    before = {n: p.detach().clone() for n, p in run.model.named_parameters()}
    with pytest.raises(DataError) as info:
        run.train_sync(1)
    message = str(info.value)
    for needle in (
        f"algorithm {algorithm.name!r}",
        "actor_logps is missing on",
        f"the loss {loss_name} needs it",
        "ReturnSpec(return_chosen_logprobs=True)",
        "ReturnSpec.for_rl()",
        "inference=InferenceSpec(",
    ):
        assert needle in message, (needle, message)
    assert run.step == 0
    assert all(torch.equal(p, before[n]) for n, p in run.model.named_parameters())


def test_the_same_rollouts_with_chosen_logprobs_train() -> None:
    run = trainer(cispo(group_size=2), InferenceSpec(return_=ReturnSpec.for_rl()))
    run.train_sync(1)
    assert run.step == 1


def test_composite_losses_name_the_terms_that_need_the_field() -> None:
    loss = CompositeLoss(
        [
            Term("pg", build_loss(with_truncated_is(reinforce(), level="sequence").loss)),
            Term("entropy", EntropyBonus(coeff=0.01)),
        ]
    )
    algorithm = TorchAlgorithm.from_spec(AlgorithmSpec("mixed", GroupNormalizedReturn(group_size=1), loss))
    rng = random.Random(0)
    item = SAWItem(
        input_ids=[rng.randrange(5, 200) for _ in range(8)],
        action_mask=[0] * 5 + [1] * 3,
        weight=1.0,
    )
    with pytest.raises(
        DataError, match=re.escape("the loss pg: TruncatedISCorrection(ReinforceLoss) needs it")
    ):
        algorithm.validate(SAWBatch([item]))
    # Required by the algorithm alone (the loss declares nothing): still named, with the fix.
    custom = TorchAlgorithm.from_spec(
        AlgorithmSpec(
            "custom", GroupNormalizedReturn(group_size=1), ReinforceLoss(), required_inputs={"actor_logps"}
        )
    )
    with pytest.raises(
        DataError, match=r"required_inputs list it \(loss ReinforceLoss\).*ReturnSpec\.for_rl"
    ):
        custom.validate(SAWBatch([item]))
