"""TinkerTrainer: the optimisation loop over SAW batches, run on Tinker.

Same driving interface as ludic-train's ``Trainer``: ``await trainer.train(num_steps)`` pulls one
macro-batch per step from a :class:`~ludic_core.saw.BatchSource`. Each step turns the batch into one
Tinker datum per SAW item, submits ``forward_backward`` and ``optim_step`` back to back (so they land
on the same server clock cycle), then waits on both. Every ``sampler_every`` steps the new weights are
published to the sampler (``save_weights_and_get_sampling_client``) and handed to the
:class:`~ludic_tinker.client.TinkerChatClient` with ``policy_version = trainer step``; every
``checkpoint_every`` steps the full state (weights and Adam moments) is saved with ``save_state``,
and with ``checkpoint_dir`` a local record of it with the batch source's position (see
:mod:`ludic_tinker.checkpoints`), so a resumed run continues on the data the interrupted one would have
seen, as a resumed local run does.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable, Sequence
from typing import Any

import attrs
import numpy as np
import tinker

from ludic_core.algorithms.spec import AlgorithmSpec
from ludic_core.credit import CreditAssigner, check_items_credit
from ludic_core.errors import ConfigError, DataError
from ludic_core.loggers.base import TrainingLogger
from ludic_core.loggers.step_result import StepResult
from ludic_core.logs import get_logger
from ludic_core.run.training import DEFAULT_ADAM_EPS
from ludic_core.saw import BatchSource, SAWBatch, SAWItem
from ludic_core.validation import check_int, int_at_least, non_negative_number
from ludic_tinker._sdk import call_for_client, sdk_has_field, translate_error, wait_result
from ludic_tinker.checkpoints import TinkerCheckpoint
from ludic_tinker.client import TinkerChatClient
from ludic_tinker.datums import datum_parts, items_to_datums
from ludic_tinker.losses import CustomLoss, TinkerLoss, tinker_loss_for
from ludic_tinker.session import TinkerTimeouts, create_training_client_from_checkpoint

__all__ = ["AdamConfig", "TinkerTrainer", "TinkerTrainerConfig"]

log = get_logger(__name__)


@attrs.frozen
class AdamConfig:
    """Tinker's Adam(W) step parameters (sent with every ``optim_step``)."""

    learning_rate: float = attrs.field(default=4e-5, validator=non_negative_number())
    beta1: float = 0.9
    beta2: float = 0.95
    eps: float = DEFAULT_ADAM_EPS
    weight_decay: float = attrs.field(default=0.0, validator=non_negative_number())
    grad_clip_norm: float = attrs.field(default=0.0, validator=non_negative_number())
    """0 disables clipping."""

    def to_tinker(self) -> tinker.AdamParams:
        kwargs: dict[str, float] = {
            "learning_rate": self.learning_rate,
            "beta1": self.beta1,
            "beta2": self.beta2,
            "eps": self.eps,
        }
        for name in ("weight_decay", "grad_clip_norm"):
            value = getattr(self, name)
            if sdk_has_field(tinker.AdamParams, name):
                kwargs[name] = value
            elif value:
                raise ConfigError(
                    f"AdamConfig.{name}={value!r} needs a newer tinker SDK (AdamParams has no {name})"
                )
        return tinker.AdamParams(**kwargs)


@attrs.frozen
class TinkerTrainerConfig:
    adam: AdamConfig = attrs.field(factory=AdamConfig)
    sampler_every: int = attrs.field(default=1, validator=int_at_least(0))
    """Publish new sampler weights every N steps (0: never; 1 keeps sampling strictly on-policy)."""
    checkpoint_every: int = attrs.field(default=0, validator=int_at_least(0))
    """Save the full state every N steps (0: never)."""
    checkpoint_dir: str | None = None
    """Where each checkpoint's local record goes (step, tinker:// path, batch-source state); ``None``
    keeps checkpoints on the service only, and a resume then restarts the batch source."""
    checkpoint_prefix: str = "ludic"
    checkpoint_ttl_s: int | None = None
    timeouts: TinkerTimeouts = attrs.field(factory=TinkerTimeouts)


class TinkerTrainer:
    """Trains on SAW batches with Tinker doing the forward/backward and optimiser step remotely.

    ``loss`` is a :class:`TinkerLoss` (server-side built-in) or a :class:`CustomLoss`
    (``forward_backward_custom``, needs torch); :meth:`from_algorithm` picks the built-in loss that
    computes an algorithm spec's objective. ``preprocess`` runs on each batch first (e.g. an
    algorithm's zero-weight filter). ``start_step`` is the step of the weights ``training_client``
    holds (0 for a fresh run; :meth:`resume` sets it from the checkpoint). ``credit_assigner`` (set by
    :meth:`from_algorithm`): items weighted by another credit assigner are refused
    (:func:`~ludic_core.credit.check_items_credit`).

    The same shape as ludic-train's local ``Trainer``: ``train(num_steps)`` returns one
    :class:`~ludic_core.loggers.step_result.StepResult` per step (canonical ``train/`` and ``perf/`` keys, ``train/step``
    included) and hands each to ``logger`` (any :class:`~ludic_core.loggers.base.TrainingLogger`), so a
    script switches backend without touching its logging. Checkpoints saved along the way are in
    :attr:`checkpoints`; ``aclose`` closes the logger.
    """

    def __init__(
        self,
        training_client: Any,
        batch_source: BatchSource,
        loss: TinkerLoss | CustomLoss,
        *,
        config: TinkerTrainerConfig | None = None,
        chat_client: TinkerChatClient | None = None,
        preprocess: Callable[[SAWBatch], SAWBatch] | None = None,
        start_step: int = 0,
        logger: TrainingLogger | None = None,
        credit_assigner: CreditAssigner | None = None,
        algorithm_name: str = "",
    ) -> None:
        if isinstance(loss, TinkerLoss):
            loss.check_supported()
        elif isinstance(loss, CustomLoss):
            loss.require_torch()
        else:
            raise ConfigError(f"loss must be a TinkerLoss or a CustomLoss, got {type(loss).__name__}")
        if start_step < 0:
            raise ConfigError(f"start_step must be >= 0, got {start_step!r}")
        self.training_client = training_client
        self.batch_source = batch_source
        self.loss = loss
        self.config = config or TinkerTrainerConfig()
        self.chat_client = chat_client
        self.preprocess = preprocess
        self.logger = logger
        self.credit_assigner = credit_assigner
        self.algorithm_name = algorithm_name or (loss.loss_fn if isinstance(loss, TinkerLoss) else "custom")
        self._adam = self.config.adam.to_tinker()
        self._step = start_step
        self._sampler_version: int | None = None
        self.checkpoints: list[TinkerCheckpoint] = []

    @classmethod
    def from_algorithm(
        cls,
        training_client: Any,
        batch_source: BatchSource,
        spec: AlgorithmSpec,
        **kwargs: Any,
    ) -> TinkerTrainer:
        """Train ``spec`` (an :class:`~ludic_core.algorithms.spec.AlgorithmSpec`): its loss spec as a Tinker
        built-in (:func:`tinker_loss_for`, which says which specs need a :class:`CustomLoss`) and its
        preprocess."""
        loss = tinker_loss_for(spec)
        preprocess = kwargs.pop("preprocess", spec.preprocess)
        kwargs.setdefault("credit_assigner", spec.credit_assigner)
        kwargs.setdefault("algorithm_name", spec.name)
        return cls(training_client, batch_source, loss, preprocess=preprocess, **kwargs)

    @classmethod
    async def resume(
        cls,
        service: tinker.ServiceClient,
        checkpoint: TinkerCheckpoint | str | os.PathLike[str],
        batch_source: BatchSource,
        loss: TinkerLoss | CustomLoss,
        **kwargs: Any,
    ) -> TinkerTrainer:
        """A trainer continuing from a :meth:`save_checkpoint` checkpoint: weights, Adam state and step,
        and the batch source's position when the checkpoint has a local record.

        ``checkpoint`` is a :class:`TinkerCheckpoint`, a ``tinker://`` path, a record file, or a
        ``checkpoint_dir`` (its newest record). A record's batch-source state is loaded into
        ``batch_source`` (which must then have ``load_state_dict``)."""
        ckpt = TinkerCheckpoint.resolve(checkpoint)
        state = ckpt.batch_source_state
        if state is not None:
            load = getattr(batch_source, "load_state_dict", None)
            if not callable(load):
                raise ConfigError(
                    f"checkpoint step {ckpt.step} recorded the batch source's position, but "
                    f"{type(batch_source).__name__} has no load_state_dict; resume with the same kind of source"
                )
            load(state)
        config = kwargs.get("config") or TinkerTrainerConfig()
        client = await create_training_client_from_checkpoint(service, ckpt.path, timeouts=config.timeouts)
        trainer = cls(client, batch_source, loss, start_step=ckpt.step, **kwargs)
        log.info("tinker.resumed", path=ckpt.path, step=ckpt.step, batch_source_restored=state is not None)
        return trainer

    @property
    def step(self) -> int:
        """Optimiser steps applied to the weights so far (the policy version of the current weights)."""
        return self._step

    @property
    def sampler_version(self) -> int | None:
        return self._sampler_version

    # ------------------------------------------------------------------ the loop

    async def train(self, num_steps: int) -> list[StepResult]:
        """Run ``num_steps`` steps, each on one batch from the batch source."""
        check_int("TinkerTrainer.train: num_steps", num_steps, 1)
        if self.chat_client is not None and self._sampler_version != self._step:
            await self.refresh_sampler()  # sample the first batch from the weights being trained
        results = []
        for _ in range(num_steps):
            batch = await self.batch_source.next_batch()
            results.append(await self.train_step(batch))
        return results

    async def train_step(self, batch: SAWBatch) -> StepResult:
        started = time.perf_counter()
        if self.credit_assigner is not None:
            check_items_credit(batch.items, self.credit_assigner, algorithm=self.algorithm_name)
        if self.preprocess is not None:
            batch = self.preprocess(batch)
        items = list(batch.items)
        if not items:
            raise DataError("the batch has no SAW items to train on")
        loss = self.loss
        if isinstance(loss, TinkerLoss):
            config = dict(loss.config) or None
            fb_output = await self._submit_and_wait(
                items_to_datums(items, loss),
                lambda data: self.training_client.forward_backward(data, loss.loss_fn, config),
            )
        else:
            fb_output = await self._submit_and_wait(self._custom_datums(items), self._custom_submit(items))
        self._step += 1
        result = StepResult(self._metrics(items, fb_output, started))
        result["train/step"] = float(self._step)
        result["train/num_action_tokens"] = float(sum(i.num_action_tokens for i in items))
        every = self.config.sampler_every
        if every and self.chat_client is not None and self._step % every == 0:
            await self.refresh_sampler()
            result["train/sampler_version"] = float(self._step)
        every = self.config.checkpoint_every
        if every and self._step % every == 0:
            await self.save_checkpoint()
            result["train/checkpoint_step"] = float(self._step)
        log.info("tinker.step", step=self._step, loss=result["train/loss"], items=len(items))
        if self.logger is not None:
            self.logger.log(self._step, result)
        return result

    async def aclose(self) -> None:
        """Close the logger (the Tinker clients belong to the caller)."""
        if self.logger is not None:
            self.logger.close()

    async def _submit_and_wait(self, data: list[tinker.Datum], submit_fb: Callable[[list[Any]], Any]) -> Any:
        adam = self._adam

        def submit() -> tuple[Any, Any]:
            # Submitted back to back, in order: both requests land on the same server clock cycle.
            fb = submit_fb(data)
            return fb, self.training_client.optim_step(adam)

        try:
            fb_future, optim_future = await asyncio.wait_for(
                asyncio.to_thread(submit), timeout=self.config.timeouts.train_s
            )
        except TimeoutError as exc:
            raise translate_error(exc, "submitting forward_backward/optim_step") from exc
        timeout = self.config.timeouts.train_s
        fb_output = await wait_result(
            fb_future, timeout_s=timeout, what=f"forward_backward (step {self._step + 1})"
        )
        await wait_result(optim_future, timeout_s=timeout, what=f"optim_step (step {self._step + 1})")
        if len(fb_output.loss_fn_outputs) != len(data):
            raise DataError(
                f"Tinker returned {len(fb_output.loss_fn_outputs)} outputs for {len(data)} datums"
            )
        return fb_output

    # ------------------------------------------------------------------ custom losses

    def _custom_datums(self, items: Sequence[SAWItem]) -> list[tinker.Datum]:
        datums = []
        for i, item in enumerate(items):
            parts = datum_parts(item, i, need_logprobs=False)
            datums.append(
                tinker.Datum(
                    model_input=tinker.ModelInput.from_ints(list(parts.model_input)),
                    loss_fn_inputs={
                        "target_tokens": tinker.TensorData.from_numpy(
                            np.asarray(parts.target_tokens, dtype=np.int64)
                        )
                    },
                )
            )
        return datums

    def _custom_submit(self, items: Sequence[SAWItem]) -> Callable[[list[Any]], Any]:
        assert isinstance(self.loss, CustomLoss)
        fn = self.loss.fn
        positions = [
            datum_parts(item, i, need_logprobs=False).action_positions for i, item in enumerate(items)
        ]

        def tinker_loss_fn(_data: list[Any], logprobs_list: list[Any]) -> tuple[Any, dict[str, float]]:
            action_logprobs = [
                lp.reshape(-1)[list(pos)] for lp, pos in zip(logprobs_list, positions, strict=True)
            ]
            return fn(items, action_logprobs)

        return lambda data: self.training_client.forward_backward_custom(data, tinker_loss_fn)

    # ------------------------------------------------------------------ metrics

    def _metrics(self, items: Sequence[SAWItem], output: Any, started: float) -> dict[str, float]:
        loss_sum = output.metrics.get("loss:sum")
        if loss_sum is None:
            raise DataError(
                f"Tinker's forward_backward result has no 'loss:sum' metric: {sorted(output.metrics)}"
            )
        metrics = {f"train/tinker/{k}": float(v) for k, v in output.metrics.items()}
        metrics["train/loss"] = float(loss_sum)
        metrics["train/num_items"] = float(len(items))
        metrics["train/weight_mean"] = float(np.mean([i.weight for i in items]))
        # KL(sampler || learner) estimates over action tokens, as the tinker-cookbook reports them.
        diffs: list[np.ndarray] = []
        for i, (item, out) in enumerate(zip(items, output.loss_fn_outputs, strict=True)):
            if item.actor_logps is None or "logprobs" not in out:
                continue
            learner = np.asarray(out["logprobs"].tolist(), dtype=np.float64).reshape(-1)
            pos = list(datum_parts(item, i, need_logprobs=False).action_positions)
            diffs.append(np.asarray(item.actor_logps, dtype=np.float64) - learner[pos])
        if diffs:
            d = np.concatenate(diffs)
            metrics["train/kl_sample_train_v1"] = float(d.mean())
            metrics["train/kl_sample_train_v2"] = float(0.5 * (d**2).mean())
        metrics["perf/step_s"] = time.perf_counter() - started
        return metrics

    # ------------------------------------------------------------------ weights and checkpoints

    async def refresh_sampler(self) -> Any:
        """Publish the current weights to a new sampler and hand it to the chat client."""
        sampler = await call_for_client(
            self.training_client.save_weights_and_get_sampling_client,
            timeout_s=self.config.timeouts.save_s,
            what="save_weights_and_get_sampling_client",
        )
        self._sampler_version = self._step
        if self.chat_client is not None:
            self.chat_client.set_sampling_client(sampler, policy_version=self._step)
        log.info("tinker.sampler_published", policy_version=self._step)
        return sampler

    async def save_checkpoint(self) -> TinkerCheckpoint:
        """Save weights and optimiser state (``save_state``) under a name that carries the step."""
        name = TinkerCheckpoint.name_for(self.config.checkpoint_prefix, self._step)
        kwargs: dict[str, Any] = {}
        if self.config.checkpoint_ttl_s is not None:
            kwargs["ttl_seconds"] = self.config.checkpoint_ttl_s
        try:
            future = await asyncio.to_thread(self.training_client.save_state, name, **kwargs)
        except Exception as exc:
            raise translate_error(exc, f"save_state({name!r})") from exc
        response = await wait_result(
            future, timeout_s=self.config.timeouts.save_s, what=f"save_state({name!r})"
        )
        state_dict = getattr(self.batch_source, "state_dict", None)
        ckpt = TinkerCheckpoint(
            path=response.path,
            step=self._step,
            batch_source_state=state_dict() if callable(state_dict) else None,
        )
        self.checkpoints.append(ckpt)
        record = None
        if self.config.checkpoint_dir is not None:
            record = ckpt.write_record(self.config.checkpoint_dir)
            # Weights and position are both durable now: a source that holds data until then (the
            # Redis pipeline's claims) may acknowledge what it trained, as under the local Trainer.
            committed = getattr(self.batch_source, "checkpoint_committed", None)
            if callable(committed):
                committed(self._step)
        log.info("tinker.checkpoint_saved", path=ckpt.path, step=ckpt.step, record=str(record))
        return ckpt
