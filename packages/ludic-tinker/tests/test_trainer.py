"""TinkerTrainer against the real SDK and the fake service."""

from __future__ import annotations

import json

import attrs
import pytest
import torch
from toy_rl import lowercase_batch_source

from ludic_core.batch_sources import OfflineBatchSource
from ludic_core.errors import ConfigError, DataError
from ludic_core.saw import SAWBatch, SAWItem
from ludic_tinker import (
    AdamConfig,
    TinkerChatClient,
    TinkerCheckpoint,
    TinkerLoss,
    TinkerTrainer,
    TinkerTrainerConfig,
    supported_loss_fns,
)
from ludic_tinker.datums import datum_parts
from ludic_tinker.testing import FakeTinkerService, TinyLM


class ListSource:
    """A BatchSource over fixed batches."""

    def __init__(self, batches: list[SAWBatch]) -> None:
        self.batches = list(batches)

    async def next_batch(self) -> SAWBatch:
        return self.batches.pop(0)


def _items() -> list[SAWItem]:
    # Byte-level ids (FakeTokenizer): prompt, action, tool output, action — one turn.
    return [
        SAWItem(
            input_ids=[72, 73, 74, 100, 101, 80, 81, 102],
            action_mask=[0, 0, 0, 1, 1, 0, 0, 1],
            weight=1.0,
            actor_logps=[-5.1, -5.2, -5.3],
        ),
        SAWItem(
            input_ids=[72, 73, 74, 110, 2],
            action_mask=[0, 0, 0, 1, 1],
            weight=-0.5,
            actor_logps=[-5.4, -5.5],
        ),
    ]


def _params(model: TinyLM) -> torch.Tensor:
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()]).clone()


async def test_step_sends_one_datum_per_item_token_by_token(training_client, fake_service: FakeTinkerService):
    items = _items()
    loss = TinkerLoss.ppo(clip_low=0.8, clip_high=1.27)
    config = TinkerTrainerConfig(adam=AdamConfig(learning_rate=1e-2))
    trainer = TinkerTrainer(training_client, ListSource([SAWBatch(items)]), loss, config=config)
    run = fake_service.training_run(training_client.model_id)
    before = _params(run.model)

    [stats] = await trainer.train(1)

    [call] = fake_service.forward_backward_calls
    assert call.loss_fn == "ppo"
    assert call.loss_fn_config == pytest.approx({"clip_low_threshold": 0.8, "clip_high_threshold": 1.27})
    assert len(call.model_inputs) == len(items)  # one datum per turn, never duplicated
    for item, tokens, inputs in zip(items, call.model_inputs, call.loss_fn_inputs, strict=True):
        n = len(item.input_ids)
        assert tokens == list(item.input_ids[:-1])
        assert inputs["target_tokens"].tolist() == list(item.input_ids[1:])
        actions = [i - 1 for i in range(1, n) if item.action_mask[i]]
        expected_logps = [0.0] * (n - 1)
        expected_adv = [0.0] * (n - 1)
        for k, pos in enumerate(actions):
            expected_logps[pos] = item.actor_logps[k]  # type: ignore[index]
            expected_adv[pos] = item.weight / len(items)
        assert inputs["logprobs"].tolist() == pytest.approx(expected_logps)
        assert inputs["advantages"].tolist() == pytest.approx(expected_adv)

    # forward_backward and optim_step both ran, in order, and moved the weights.
    assert run.optim_steps == 1
    assert fake_service.optim_step_params[-1]["learning_rate"] == pytest.approx(1e-2)
    assert not torch.equal(before, _params(run.model))
    assert stats["train/step"] == trainer.step == 1
    assert stats["train/num_items"] == 2 and stats["train/num_action_tokens"] == 5
    assert "train/kl_sample_train_v1" in stats


async def test_loss_value_matches_a_local_computation(training_client, fake_service):
    items = _items()
    loss = TinkerLoss.importance_sampling(normalization="sum")
    run = fake_service.training_run(training_client.model_id)
    expected = 0.0
    with torch.no_grad():
        for i, item in enumerate(items):
            parts = datum_parts(item, i, need_logprobs=True)
            p = run.model.token_logprobs(parts.model_input, parts.target_tokens)
            q = torch.tensor(parts.sampler_logprobs)
            adv = torch.zeros(len(p))
            adv[list(parts.action_positions)] = item.weight
            expected += float(-(torch.exp(p - q) * adv).sum())
    trainer = TinkerTrainer(training_client, ListSource([SAWBatch(items)]), loss)
    [stats] = await trainer.train(1)
    assert stats["train/loss"] == pytest.approx(expected, rel=1e-5)


@pytest.mark.parametrize(
    "loss",
    [
        TinkerLoss.importance_sampling(),
        TinkerLoss.cispo(clip_low=0.0, clip_high=1.2),
        TinkerLoss.dro(beta=0.05),
        TinkerLoss.cross_entropy(),
        TinkerLoss.gspo(clip_low=1 - 3e-4, clip_high=1 + 4e-4),
    ],
    ids=lambda loss: loss.loss_fn,
)
async def test_each_builtin_loss_gets_exactly_its_inputs(training_client, fake_service, loss):
    if loss.loss_fn not in supported_loss_fns():
        with pytest.raises(ConfigError, match=loss.loss_fn):
            TinkerTrainer(training_client, ListSource([]), loss)
        return
    trainer = TinkerTrainer(training_client, ListSource([SAWBatch(_items())]), loss)
    await trainer.train(1)
    [call] = fake_service.forward_backward_calls
    assert call.loss_fn == loss.loss_fn
    assert all(set(inputs) == set(loss.inputs) for inputs in call.loss_fn_inputs)


async def test_sampler_refresh_hands_version_to_the_chat_client(training_client, tokenizer, fake_service):
    client = TinkerChatClient(object(), tokenizer)
    config = TinkerTrainerConfig(sampler_every=2)
    batches = [SAWBatch(_items()) for _ in range(3)]
    trainer = TinkerTrainer(
        training_client,
        ListSource(batches),
        TinkerLoss.ppo(clip_low=0.8, clip_high=1.2),
        chat_client=client,
        config=config,
    )
    stats = await trainer.train(3)
    assert [s.get("train/sampler_version") for s in stats] == [None, 2, None]
    assert client.policy_version == 2 == trainer.sampler_version
    assert len(fake_service.sampler_ids) == 2  # the initial one (version 0) and version 2


async def test_checkpoint_and_resume_restore_weights_adam_state_and_step(
    service_client, training_client, fake_service
):
    config = TinkerTrainerConfig(
        checkpoint_every=2, checkpoint_prefix="run", adam=AdamConfig(learning_rate=1e-2)
    )
    batches = [SAWBatch(_items()) for _ in range(3)]
    trainer = TinkerTrainer(
        training_client, ListSource(batches), TinkerLoss.ppo(clip_low=0.8, clip_high=1.2), config=config
    )
    stats = await trainer.train(2)
    assert stats[-1]["train/checkpoint_step"] == 2
    ckpt = trainer.checkpoints[-1]
    assert ckpt.step == 2 and ckpt.path.endswith("/weights/run-step000002")
    assert TinkerCheckpoint.from_path(ckpt.path) == ckpt
    saved = _params(fake_service.training_run(training_client.model_id).model)

    resumed = await TinkerTrainer.resume(
        service_client,
        ckpt.path,
        ListSource(batches[2:]),
        TinkerLoss.ppo(clip_low=0.8, clip_high=1.2),
        config=config,
    )
    assert resumed.step == 2
    new_run = fake_service.training_run(resumed.training_client.model_id)
    assert new_run.model_id != training_client.model_id
    assert torch.equal(_params(new_run.model), saved)
    assert new_run.optimizer.state_dict()["state"], "Adam moments were restored"
    [after] = await resumed.train(1)
    assert after["train/step"] == 3


class CommittingSource(OfflineBatchSource):
    """An offline source that records which steps the trainer reported durable."""

    committed: list[int]

    def checkpoint_committed(self, step: int) -> None:
        self.committed = [*getattr(self, "committed", []), step]


async def test_a_checkpoint_dir_makes_the_batch_source_resume_where_it_stood(
    service_client, training_client, fake_service, tmp_path
):
    def source() -> CommittingSource:
        items = [attrs.evolve(item, meta={"n": n}) for n, item in enumerate(_items() * 3)]
        return CommittingSource(items, batch_size=2, shuffle=True, seed=7)

    config = TinkerTrainerConfig(
        checkpoint_every=2, checkpoint_dir=str(tmp_path / "ckpt"), adam=AdamConfig(learning_rate=1e-2)
    )
    # What an uninterrupted run would train on at step 3.
    reference = source()
    for _ in range(2):
        await reference.next_batch()
    step3_items = [i.meta["n"] for i in (await reference.next_batch()).items]

    first = source()
    trainer = TinkerTrainer(
        training_client, first, TinkerLoss.ppo(clip_low=0.8, clip_high=1.2), config=config
    )
    await trainer.train(2)
    assert first.committed == [2]  # acknowledged only once the record was written
    record = TinkerCheckpoint.latest_in(tmp_path / "ckpt")
    assert record is not None and record.step == 2 and record.path == trainer.checkpoints[-1].path
    assert record.batch_source_state == first.state_dict()

    again = source()  # a fresh process: the position comes from the record, not from memory
    resumed = await TinkerTrainer.resume(
        service_client, tmp_path / "ckpt", again, TinkerLoss.ppo(clip_low=0.8, clip_high=1.2), config=config
    )
    assert resumed.step == 2 and again.state_dict() == first.state_dict()
    assert [i.meta["n"] for i in (await again.next_batch()).items] == step3_items
    with pytest.raises(ConfigError, match="has no load_state_dict"):
        await TinkerTrainer.resume(
            service_client, tmp_path / "ckpt", ListSource([]), TinkerLoss.ppo(clip_low=0.8, clip_high=1.2)
        )
    with pytest.raises(ConfigError, match=r"holds no step_NNNNNNNN\.json record"):
        await TinkerTrainer.resume(
            service_client, tmp_path, again, TinkerLoss.ppo(clip_low=0.8, clip_high=1.2)
        )


async def test_service_errors_surface_as_ludic_errors(training_client, fake_service):
    from ludic_tinker import TinkerRequestError

    fake_service.fail_next["/api/v1/forward_backward"] = "injected failure"
    trainer = TinkerTrainer(
        training_client, ListSource([SAWBatch(_items())]), TinkerLoss.ppo(clip_low=0.8, clip_high=1.2)
    )
    with pytest.raises(TinkerRequestError, match="injected failure"):
        await trainer.train(1)


async def test_bad_batches_are_rejected_before_sending(training_client, fake_service):
    no_logps = SAWItem(input_ids=[72, 73, 100], action_mask=[0, 0, 1], weight=1.0)
    trainer = TinkerTrainer(
        training_client, ListSource([SAWBatch([no_logps])]), TinkerLoss.ppo(clip_low=0.8, clip_high=1.2)
    )
    with pytest.raises(DataError, match="actor_logps"):
        await trainer.train(1)
    assert fake_service.forward_backward_calls == []


async def test_ratio_losses_refuse_items_sampled_at_another_temperature(training_client, fake_service):
    def at(temperature: float | None) -> list[SAWItem]:
        return [attrs.evolve(item, sampling_temperature=temperature) for item in _items()]

    for loss in (
        TinkerLoss.ppo(clip_low=0.8, clip_high=1.2),
        TinkerLoss.importance_sampling(),
        TinkerLoss.cispo(clip_low=0.8, clip_high=1.2),
    ):
        trainer = TinkerTrainer(training_client, ListSource([SAWBatch(at(0.7))]), loss)
        with pytest.raises(
            DataError, match=r"SAW item 0: sampled at temperature 0\.7.*sample at temperature 1\.0"
        ):
            await trainer.train(1)
    assert fake_service.forward_backward_calls == []  # refused before anything was sent
    # Temperature 1, greedy (untempered logprobs) and unknown train; SFT compares no logprobs.
    batches = [SAWBatch(at(1.0)), SAWBatch(at(0.0)), SAWBatch(at(None))]
    await TinkerTrainer(
        training_client, ListSource(batches), TinkerLoss.ppo(clip_low=0.8, clip_high=1.2)
    ).train(3)
    await TinkerTrainer(training_client, ListSource([SAWBatch(at(0.7))]), TinkerLoss.cross_entropy()).train(1)
    assert len(fake_service.forward_backward_calls) == 4


@pytest.mark.slow
async def test_grpo_on_a_toy_env_raises_reward(training_client, tokenizer, fake_service):
    client = TinkerChatClient(object(), tokenizer, timeout_s=60)
    source = lowercase_batch_source(client, groups=4, group_size=8, max_tokens=4)
    config = TinkerTrainerConfig(adam=AdamConfig(learning_rate=0.1))
    trainer = TinkerTrainer(
        training_client,
        source,
        TinkerLoss.ppo(clip_low=0.8, clip_high=1.27),
        chat_client=client,
        config=config,
    )
    await trainer.refresh_sampler()  # version 0: the base weights sample the first batch
    rewards: list[float] = []
    stats = []
    for _ in range(15):
        batch = await source.next_batch()
        assert batch.meta["num_failed_episodes"] == 0, batch.meta["failures"][:1]
        rewards.append(batch.meta["avg_total_reward"])
        stats.append(await trainer.train_step(batch))
    print("GRPO rewards per step:", [round(r, 3) for r in rewards])
    first, last = sum(rewards[:3]) / 3, sum(rewards[-3:]) / 3
    assert last > first + 0.2, f"reward did not rise: {rewards}"
    # Strictly on-policy: each batch was sampled by the weights of the previous step.
    assert [s["train/sampler_version"] for s in stats] == list(range(1, 16))


async def test_custom_loss_runs_through_forward_backward_custom(training_client, fake_service):
    from ludic_tinker import CustomLoss

    items = _items()

    def weighted_nll(batch_items, action_logprobs):  # type: ignore[no-untyped-def]
        # SFT-style: -Σ w_b · Σ_t log p(a_t), computed locally from Tinker's logprobs.
        loss = sum(-item.weight * lp.sum() for item, lp in zip(batch_items, action_logprobs, strict=True))
        return loss, {"n_actions": float(sum(len(lp) for lp in action_logprobs))}

    trainer = TinkerTrainer(training_client, ListSource([SAWBatch(items)]), CustomLoss(weighted_nll))
    [stats] = await trainer.train(1)

    forward, backward = fake_service.forward_backward_calls
    assert forward.forward_only and backward.loss_fn == "cross_entropy" and not backward.forward_only
    for item, inputs in zip(items, backward.loss_fn_inputs, strict=True):
        n = len(item.input_ids)
        expected = [0.0] * (n - 1)
        for i in range(1, n):
            if item.action_mask[i]:
                expected[i - 1] = item.weight  # weights = -dLoss/dlogprob
        assert inputs["weights"].tolist() == pytest.approx(expected)
    assert stats["train/tinker/n_actions"] == 5.0
    assert fake_service.training_run(training_client.model_id).optim_steps == 1


async def test_results_go_to_the_same_logger_interface_as_the_local_trainer(training_client, tmp_path):
    from ludic_core.loggers.jsonl import JsonlLogger
    from ludic_core.loggers.step_result import StepResult

    logger = JsonlLogger(tmp_path / "metrics.jsonl")
    trainer = TinkerTrainer(
        training_client,
        ListSource([SAWBatch(_items()) for _ in range(2)]),
        TinkerLoss.ppo(clip_low=0.8, clip_high=1.2),
        logger=logger,
    )
    results = await trainer.train(2)
    await trainer.aclose()
    assert all(isinstance(r, StepResult) for r in results)
    lines = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [line["step"] for line in lines] == [1, 2]
    assert [line["train/loss"] for line in lines] == [r["train/loss"] for r in results]
