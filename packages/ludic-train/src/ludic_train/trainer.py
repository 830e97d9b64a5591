"""The Trainer: an optimisation loop over SAW batches, and nothing more.

Each step pulls a macro-batch from the batch source, drops items that lag the current policy by more
than ``max_lag``, lets the algorithm preprocess and validate it, splits it into token-budget
micro-batches, accumulates their gradients (each micro-batch loss scaled so the sum equals the
macro-batch gradient), clips, steps the optimiser (or skips the step when its loss or gradient norm
is not finite), publishes the weights every N steps with
``version = step``, checkpoints, evaluates and logs. Envs, episodes and credit assignment live
upstream of the batch source; new algorithms are new ``AlgorithmSpec`` values, not new trainers.

Items are checked where they enter (:mod:`ludic_train.guards`): a non-finite or out-of-range value
drops the item with a warning and a count, and a non-finite step is never applied.
"""

from __future__ import annotations

import asyncio
import math
import os
import resource
import sys
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from ludic_core.algorithms.spec import AlgorithmSpec
from ludic_core.credit import check_items_credit
from ludic_core.errors import ConfigError, DataError
from ludic_core.loggers.base import TrainingLogger, canonicalize, is_number
from ludic_core.loggers.step_result import StepResult
from ludic_core.logs import get_logger
from ludic_core.publisher import PolicyPublisher
from ludic_core.saw import BatchSource, SAWBatch, SAWItem
from ludic_core.validation import check_int
from ludic_train.algorithm import TorchAlgorithm
from ludic_train.checkpoint import CheckpointManager, LoadedCheckpoint
from ludic_train.config import TrainerConfig
from ludic_train.guards import check_items, model_vocab_size
from ludic_train.memory_budget import derive_micro_token_budget
from ludic_train.microbatch import MicroBatch, collate_micro_batches, micro_loss_scale
from ludic_train.rank_zero import rank, share_rank_zero_outcome
from ludic_train.rng_states import RNGState
from ludic_train.weights import is_fsdp_module, merged_state_dict

if TYPE_CHECKING:
    import torch

__all__ = ["Evaluator", "Trainer"]

log = get_logger(__name__)

Evaluator = Callable[[int], Awaitable[Mapping[str, Any]]]
"""``await evaluator(step)`` returns metrics (logged under ``eval/``)."""

ResumeTarget = int | str | os.PathLike[str] | Literal["latest"] | None

# Batch-meta averages forwarded to the step's metrics (names as the rollout batch source writes them).
_BATCH_META_METRICS = (
    "avg_total_reward",
    "avg_completion_length",
    "avg_prompt_length",
    "num_failed_episodes",
)
# Batch-meta keys forwarded by prefix: per-teacher counts and reverse KL from TeacherScoredBatchSource.
_BATCH_META_PREFIXES = ("teacher_items/", "teacher_reverse_kl/")


class Trainer:
    """Args:
    model: a causal LM (plain, PEFT-wrapped, or already ``fully_shard``-ed with FSDP2).
    algorithm: an :class:`~ludic_core.algorithms.spec.AlgorithmSpec` (e.g. ``ludic_core.algorithms.grpo()``):
        credit assigner + loss (+ preprocess); the trainer runs the loss and preprocess
        (:class:`~ludic_train.algorithm.TorchAlgorithm`) and checks items against the credit.
    batch_source: anything with ``async next_batch() -> SAWBatch``; if it also has
        ``state_dict``/``load_state_dict``, checkpoints record and restore its position; if it has
        ``checkpoint_committed(step)``, that is called once each checkpoint is durable.
    config: :class:`TrainerConfig`.
    publisher: receives the weights every ``config.publish_every_steps`` steps, and once before the
        first step of a resumed run. Under FSDP2 rank 0 alone sends (every rank joins the gather), so
        the other ranks may pass None; they wait for rank 0's publish and fail with it.
    checkpointer: a :class:`CheckpointManager` (saves every ``every_n_steps``).
    resume_from: a step, a checkpoint path, ``"latest"`` (the newest checkpoint if there is one,
        else a fresh start) or ``None``.
    logger: a :class:`TrainingLogger` (tee several with ``TeeLogger``).
    evaluator: ``async (step) -> metrics``; runs at start / every N steps as configured.
    rngs: generators the run owns (``random.Random``, ``torch.Generator``, numpy) to checkpoint.
    param_filter: ``(hf_name, tensor) -> bool`` selects what gets published.
    """

    def __init__(
        self,
        *,
        model: Any,
        algorithm: AlgorithmSpec,
        batch_source: BatchSource,
        config: TrainerConfig,
        publisher: PolicyPublisher | None = None,
        checkpointer: CheckpointManager | None = None,
        resume_from: ResumeTarget = None,
        logger: TrainingLogger | None = None,
        evaluator: Evaluator | None = None,
        rngs: Mapping[str, RNGState] | None = None,
        param_filter: Callable[[str, torch.Tensor], bool] | None = None,
        optimizer: torch.optim.Optimizer | None = None,
    ) -> None:
        import torch

        # Under FSDP2 only rank 0 sends the weights, so the other ranks need no publisher of their own;
        # every rank publishes (joins the gather) exactly when rank 0 has one.
        self._publishes = _on_every_rank_as_on_rank_zero(publisher is not None, sharded=is_fsdp_module(model))
        if config.publish_every_steps and not self._publishes:
            raise ConfigError(
                f"TrainerConfig.publish_every_steps={config.publish_every_steps} but no publisher was given; "
                "pass publisher= or set publish_every_steps=0"
            )
        if (config.eval_at_start or config.eval_every_steps) and evaluator is None:
            raise ConfigError(
                "TrainerConfig asks for evaluation (eval_at_start / eval_every_steps) but evaluator=None"
            )
        if resume_from is not None and checkpointer is None:
            raise ConfigError(f"resume_from={resume_from!r} needs a checkpointer")
        self.config = config
        self._torch_algorithm = TorchAlgorithm.from_spec(algorithm)
        self.algorithm = algorithm
        self.batch_source = batch_source
        self._warned_unstamped = False
        self.publisher = publisher
        self.checkpointer = checkpointer
        self.logger = logger
        self.evaluator = evaluator
        self.rngs = dict(rngs or {})
        self.param_filter = param_filter
        self.device = torch.device(config.resolved_device())
        self._fsdp = is_fsdp_module(model)
        if not self._fsdp:
            model.to(self.device)
        if config.gradient_checkpointing:
            self._enable_gradient_checkpointing(model)
        self.model = model
        self._vocab_size = model_vocab_size(model)
        self.micro_token_budget = self._micro_token_budget()
        # Under FSDP2 every rank must run the same forward passes, and a prefix pass is one more that
        # only some ranks' micro-batches would take; gradient checkpointing turns the KV cache off.
        self._share_prefix = (
            config.share_prompt_prefix and not self._fsdp and not config.gradient_checkpointing
        )
        inert = getattr(self._torch_algorithm.loss, "zero_weight_items_inert", None)
        self._skip_zero_weight = config.skip_zero_weight_items and callable(inert) and bool(inert())
        self._consecutive_skips = 0
        self.optimizer = optimizer if optimizer is not None else self._make_optimizer()
        self.optimizer.zero_grad(set_to_none=True)
        self.step = 0
        self.last_eval: dict[str, float] = {}
        self.history: list[StepResult] = []
        # A resumed run publishes its weights before training: the sampler may hold (and tag data
        # with) newer weights of the continuation this resume discards.
        self._publish_before_training = False
        if resume_from is not None:
            self._resume(resume_from)

    # --- setup ----------------------------------------------------------------------------------------

    def _micro_token_budget(self) -> int:
        """The configured budget, or one derived from the model's shape and the device's memory."""
        cfg = self.config
        if cfg.micro_token_budget is not None:
            return cfg.micro_token_budget
        budget = derive_micro_token_budget(
            self.model, self.device, gradient_checkpointing=cfg.gradient_checkpointing
        )
        log.info(
            "trainer.micro_token_budget",
            tokens=budget.tokens,
            bytes_per_token=budget.bytes_per_token,
            activation_gb=None
            if budget.activation_bytes is None
            else round(budget.activation_bytes / 2**30, 2),
            derived_from=budget.reason,
        )
        return budget.tokens

    def _trainable_parameters(self) -> list[torch.nn.Parameter]:
        params = [p for p in self.model.parameters() if p.requires_grad]
        if not params:
            raise ConfigError("the model has no parameters with requires_grad=True; nothing to train")
        return params

    def _make_optimizer(self) -> torch.optim.Optimizer:
        import torch

        params = self._trainable_parameters()
        cfg = self.config
        if cfg.optimizer == "sgd":
            return torch.optim.SGD(params, lr=cfg.lr, weight_decay=cfg.weight_decay)
        return torch.optim.AdamW(
            params, lr=cfg.lr, weight_decay=cfg.weight_decay, betas=cfg.betas, eps=cfg.eps
        )

    @staticmethod
    def _enable_gradient_checkpointing(model: Any) -> None:
        enable = getattr(model, "gradient_checkpointing_enable", None)
        if not callable(enable):
            raise ConfigError(
                f"gradient_checkpointing=True needs a model with gradient_checkpointing_enable(); "
                f"{type(model).__name__} has none"
            )
        # Non-reentrant checkpointing works with frozen inputs (LoRA) without enable_input_require_grads.
        enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        config = getattr(model, "config", None)
        if config is not None:
            config.use_cache = False

    def _resume(self, target: ResumeTarget) -> None:
        assert self.checkpointer is not None
        if target == "latest":
            if self.checkpointer.latest() is None:
                log.info("trainer.resume.fresh_start", output_dir=str(self.checkpointer.cfg.output_dir))
                return
            target = None
        loaded: LoadedCheckpoint = self.checkpointer.load(
            target,
            model=self.model,
            optimizer=self.optimizer,
            batch_source=self.batch_source,
            rngs=self.rngs,
        )
        self.step = loaded.step
        self.last_eval = {k: v for k, v in loaded.trainer_state.get("last_eval", {}).items() if is_number(v)}
        self._publish_before_training = self._publishes

    # --- the loop -------------------------------------------------------------------------------------

    @property
    def current_step(self) -> int:
        return self.step

    async def train(self, num_steps: int) -> list[StepResult]:
        """Run ``num_steps`` more optimiser steps; returns their metrics."""
        check_int("train(num_steps)", num_steps, 0)
        set_total = getattr(self.logger, "set_total", None)
        if callable(set_total):
            set_total(self.step + num_steps, completed=self.step)
        if self.config.eval_at_start and self.step == 0:
            await self.evaluate()
        results = []
        for _ in range(num_steps):
            results.append(await self.train_step())
        return results

    def train_sync(self, num_steps: int) -> list[StepResult]:
        return asyncio.run(self.train(num_steps))

    async def train_step(self) -> StepResult:
        import torch

        cfg = self.config
        if self._publish_before_training:
            self._publish_before_training = False
            await self.publish()
        t_start = time.perf_counter()
        batch, stale = await self._next_fresh_batch()
        t_data = time.perf_counter()

        self.model.train()
        total_items = len(batch.items)
        # Items of weight 0 add nothing to an inert loss or its gradient (the loss is a mean over all
        # items, theirs counted as 0, so each micro-batch is still scaled by the whole batch's count).
        trained = [i for i in batch.items if i.weight != 0.0] if self._skip_zero_weight else list(batch.items)
        micro_batches = self._collate(trained)
        stat_sums: dict[str, torch.Tensor] = {}
        loss_sum = torch.zeros((), device=self.device)
        # Sharded ranks must run the same number of forward/backward passes (each one is a collective);
        # a rank with fewer micro-batches repeats its last one (or, with none, its batch's first item)
        # with a zero loss scale.
        passes = _max_across_ranks(len(micro_batches), self.device) if self._fsdp else len(micro_batches)
        runs = micro_batches or (self._collate(list(batch.items[:1])) if passes else [])
        for index in range(passes):
            padding_pass = index >= len(micro_batches)
            micro = runs[min(index, len(runs) - 1)]
            if self._fsdp:
                self.model.set_requires_gradient_sync(index == passes - 1)
            loss, stats = self._torch_algorithm.compute_loss(
                self.model,
                micro.tensors,
                cast_logits_to_fp32=cfg.cast_logits_to_fp32,
                share_prefix=self._share_prefix,
            )
            if padding_pass:
                (loss * 0.0).backward()
                continue
            scale = micro_loss_scale(micro.num_items, total_items)
            (loss * scale).backward()
            loss_sum = loss_sum + loss.detach() * scale
            # Stats are means over the items that ran, except a loss's "loss", which like the objective
            # is a mean over every item (a skipped one adds exactly 0 to it).
            stat_scale = micro_loss_scale(micro.num_items, len(trained))
            for key, value in stats.items():
                weighted = value.detach().float() * (scale if key == "loss" else stat_scale)
                stat_sums[key] = stat_sums[key] + weighted if key in stat_sums else weighted
        if not passes:
            # The optimiser must see the zero gradient the skipped items have: AdamW skips parameters
            # whose grad is None, but steps its moments (and decays weights) on a zero grad.
            for param in self._trainable_parameters():
                param.grad = torch.zeros_like(param)

        grad_norm = _grad_norm(self._trainable_parameters(), cfg.max_grad_norm)
        real_tokens = sum(m.num_tokens for m in micro_batches)
        # Truncation to max_seq_len happens inside collate_micro_batches, so count it there.
        counts = {
            "num_samples": float(total_items),
            "num_micro_batches": float(len(micro_batches)),
            "num_tokens": float(real_tokens),
            "num_action_tokens": float(sum(i.num_action_tokens for i in batch.items)),
            "num_truncated": float(sum(m.num_truncated for m in micro_batches)),
            "num_skipped": float(total_items - len(trained)),
        }
        means = {"loss": loss_sum, **stat_sums}
        # One device→host transfer for every stat of the step; sharded ranks first combine theirs in
        # one collective, so every rank logs the whole macro-batch's numbers, not its own shard's. It
        # runs before the optimiser step because the skip decision reads it: a NaN loss on any rank
        # makes the combined loss NaN on every rank, so all ranks skip together and the shards stay
        # in step.
        # clip_grad_norm_ over sharded (DTensor) grads returns the norm of the whole model.
        full_norm = grad_norm.full_tensor() if hasattr(grad_norm, "full_tensor") else grad_norm
        replicated: dict[str, torch.Tensor] = {"grad_norm": full_norm}
        # The objective that was backpropagated rides along as the last mean: a loss's own stats may
        # report a "loss" of their own, which then replaces it in the logged metrics.
        host_means, host_counts, host_replicated = _combine_stats(
            [*means.values(), loss_sum],
            list(counts.values()),
            list(replicated.values()),
            weight=total_items,
            device=self.device,
            across_ranks=self._fsdp,
        )
        guarded = {"loss": host_means.pop(), "grad_norm": host_replicated[0]}
        metrics: dict[str, float] = {
            f"train/{k}" if "/" not in k else k: v
            for k, v in [*zip(means, host_means, strict=True), *zip(replicated, host_replicated, strict=True)]
        }
        totals = dict(zip(counts, host_counts, strict=True))
        nonfinite = [k for k, v in guarded.items() if not math.isfinite(v)]
        if nonfinite:
            self._skip_step(nonfinite, guarded)
        else:
            self.optimizer.step()
            self._consecutive_skips = 0
        self.optimizer.zero_grad(set_to_none=True)
        self.step += 1
        t_train = time.perf_counter()
        metrics.update(
            {
                "train/step": float(self.step),
                "train/lr": float(self.optimizer.param_groups[0]["lr"]),
                "train/num_samples": totals["num_samples"],
                "train/num_micro_batches": totals["num_micro_batches"],
                "train/num_tokens": totals["num_tokens"],
                "train/num_action_tokens": totals["num_action_tokens"],
                "train/seq_len_truncated_rate": totals["num_truncated"] / totals["num_samples"],
                "train/zero_weight_items_skipped": totals["num_skipped"],
                "train/stale_items_dropped": float(stale["dropped"]),
                "train/invalid_items_dropped": float(stale["invalid"]),
                "train/skipped_steps": 1.0 if nonfinite else 0.0,
                "train/consecutive_skipped_steps": float(self._consecutive_skips),
            }
        )
        if stale["lags"]:
            metrics["train/policy_lag_mean"] = sum(stale["lags"]) / len(stale["lags"])
            metrics["train/policy_lag_max"] = float(max(stale["lags"]))
        for key in _BATCH_META_METRICS:
            if is_number(batch.meta.get(key)):
                metrics[f"train/{key}"] = float(batch.meta[key])
        for key, value in batch.meta.items():
            if key.startswith(_BATCH_META_PREFIXES) and is_number(value):
                metrics[f"train/{key}"] = float(value)

        if cfg.publish_every_steps and self.step % cfg.publish_every_steps == 0:
            await self.publish()
        t_publish = time.perf_counter()
        if self.checkpointer is not None and self.checkpointer.should_save(self.step):
            self.save_checkpoint()
        t_end = time.perf_counter()

        metrics.update(
            {
                "perf/step_s": t_end - t_start,
                "perf/batch_wait_s": t_data - t_start,
                "perf/train_s": t_train - t_data,
                "perf/publish_s": t_publish - t_train,
                "perf/checkpoint_s": t_end - t_publish,
                "perf/tokens_per_s": real_tokens / max(t_train - t_data, 1e-9),
                **_memory_stats(self.device),
            }
        )
        result = StepResult(metrics)
        self.history.append(result)
        if cfg.eval_every_steps and self.step % cfg.eval_every_steps == 0:
            await self.evaluate()
        if self.logger is not None and (self.step % cfg.log_every == 0) and rank() == 0:
            self.logger.log(self.step, result)
        return result

    def _collate(self, items: list[SAWItem]) -> list[MicroBatch]:
        cfg = self.config
        return collate_micro_batches(
            items,
            pad_token_id=cfg.pad_token_id,
            micro_token_budget=self.micro_token_budget,
            max_seq_len=cfg.max_seq_len,
            device=self.device,
            group_prompts=self._share_prefix,
        )

    def _skip_step(self, nonfinite: list[str], values: Mapping[str, float]) -> None:
        """Drop the step's gradients instead of applying them (weights and optimiser state unchanged),
        or raise once ``max_consecutive_skipped_steps`` steps in a row were skipped."""
        self.optimizer.zero_grad(set_to_none=True)
        self._consecutive_skips += 1
        limit = self.config.max_consecutive_skipped_steps
        log.warning(
            "trainer.step_skipped",
            step=self.step + 1,
            nonfinite=nonfinite,
            consecutive=self._consecutive_skips,
            loss=values["loss"],
            grad_norm=values["grad_norm"],
        )
        if self._consecutive_skips >= limit:
            raise DataError(
                f"step {self.step + 1}: {' and '.join(nonfinite)} not finite ({dict(values)}) on "
                f"{self._consecutive_skips} consecutive steps, reaching "
                f"TrainerConfig.max_consecutive_skipped_steps={limit} (no update applied since step "
                f"{self.step + 1 - self._consecutive_skips}); lower the learning rate, check the batches' "
                "weights and logprobs, or resume from an earlier checkpoint"
            )

    async def _next_fresh_batch(self) -> tuple[SAWBatch, dict[str, Any]]:
        """Pull batches until one has items left after the staleness filter and the preprocess."""
        dropped = 0
        invalid = 0
        lags: list[int] = []
        for _attempt in range(self.config.max_refills):
            batch = await self.batch_source.next_batch()
            if not isinstance(batch, SAWBatch):
                raise DataError(f"batch source returned {type(batch).__name__}, expected SAWBatch")
            self._check_credit(batch.items)
            items, rejected = check_items(batch.items, vocab_size=self._vocab_size)
            if rejected:
                invalid += len(rejected)
                log.warning(
                    "trainer.invalid_items_dropped",
                    step=self.step,
                    count=len(rejected),
                    items=rejected[:10],
                )
            self._reject_future_versions(items)
            if self.config.max_lag is not None:
                fresh: list[SAWItem] = []
                for item in items:
                    version = item.meta.get("policy_version")
                    # Untagged items (offline data) count as fresh.
                    lag = self.step - version if isinstance(version, int) else 0
                    if lag <= self.config.max_lag:
                        fresh.append(item)
                        lags.append(lag)
                    else:
                        dropped += 1
                items = fresh
            else:
                lags.extend(
                    self.step - i.meta["policy_version"]
                    for i in items
                    if isinstance(i.meta.get("policy_version"), int)
                )
            batch = SAWBatch(items=items, meta=dict(batch.meta))
            if batch.items:
                batch = self._torch_algorithm.prepare(batch)
            if batch.items:
                return batch, {"dropped": dropped, "invalid": invalid, "lags": lags}
            log.info("trainer.empty_batch", step=self.step, stale_dropped=dropped, invalid_dropped=invalid)
        raise DataError(
            f"{self.config.max_refills} consecutive batches were empty after the staleness filter "
            f"(max_lag={self.config.max_lag}, {dropped} items dropped), the item checks ({invalid} "
            "invalid items dropped, see the trainer.invalid_items_dropped warnings) and the algorithm's "
            "preprocess; "
            "check that the publisher moves the sampler's policy version"
        )

    def _check_credit(self, items: Sequence[SAWItem]) -> None:
        unstamped = check_items_credit(items, self.algorithm.credit_assigner, algorithm=self.algorithm.name)
        if unstamped and not self._warned_unstamped:
            self._warned_unstamped = True
            # Info, not a warning: SFT data and hand-made items are unstamped by design.
            log.info(
                "trainer.credit_not_applied",
                reason="items carry no credit stamp; their weights train as given",
                algorithm=self.algorithm.name,
            )

    def _reject_future_versions(self, items: list[SAWItem]) -> None:
        """Data sampled by weights newer than the trainer's own step cannot come from this run (e.g.
        leftovers of an earlier run on the same Redis queue); training on it would be silently wrong."""
        future = [i.meta["policy_version"] for i in items if is_number(i.meta.get("policy_version"))]
        future = [v for v in future if v > self.step]
        if future:
            raise DataError(
                f"{len(future)} items carry policy_version up to {max(future)} but the trainer is at step "
                f"{self.step}: they were sampled by weights this run has not produced (a stale queue or a "
                "publisher out of step); clear the source or resume the matching checkpoint"
            )

    # --- publishing, checkpoints, eval ----------------------------------------------------------------

    async def publish(self) -> None:
        """Send the current weights to the publisher with ``version = step``."""
        if not self._publishes:
            raise ConfigError("publish() needs a publisher")
        if not self._fsdp:
            if self.publisher is not None and getattr(self.publisher, "shares_trainer_weights", False):
                await self.publisher.publish({}, version=self.step)
                return
            await self.publisher.publish(  # type: ignore[union-attr]
                merged_state_dict(self.model, param_filter=self.param_filter), version=self.step
            )
            return
        # Every FSDP2 rank joins the gather; only rank 0 sends. The others then wait for its outcome:
        # their next batch must be sampled by the weights just published, and a failed publish stops
        # every rank at once instead of leaving them in the next collective until its timeout.
        tensors = merged_state_dict(self.model, param_filter=self.param_filter)
        failure: Exception | None = None
        if rank() == 0:
            try:
                await self.publisher.publish(tensors, version=self.step)  # type: ignore[union-attr]
            except Exception as exc:
                failure = exc
        share_rank_zero_outcome(failure, f"publishing version {self.step}")

    def save_checkpoint(self) -> Path | None:
        if self.checkpointer is None:
            raise ConfigError("save_checkpoint() needs a checkpointer")
        path = self.checkpointer.save(
            self.step,
            model=self.model,
            optimizer=self.optimizer,
            trainer_state={"algorithm": self.algorithm.name, "last_eval": self.last_eval},
            batch_source=self.batch_source,
            rngs=self.rngs,
        )
        # The checkpoint is durable: a source that holds data until then (the Redis pipeline's
        # claims) may acknowledge what it trained.
        committed = getattr(self.batch_source, "checkpoint_committed", None)
        if callable(committed):
            committed(self.step)
        return path

    async def evaluate(self) -> dict[str, float]:
        if self.evaluator is None:
            raise ConfigError("evaluate() needs an evaluator")
        if rank() != 0:
            return {}
        was_training = self.model.training
        self.model.eval()
        t0 = time.perf_counter()
        try:
            raw = await self.evaluator(self.step)
        finally:
            self.model.train(was_training)
        metrics = {
            (k if k.startswith("eval/") else f"eval/{k}"): float(v) for k, v in raw.items() if is_number(v)
        }
        metrics["perf/eval_s"] = time.perf_counter() - t0
        self.last_eval = metrics
        if self.logger is not None:
            self.logger.log(self.step, canonicalize(metrics))
        return metrics

    async def aclose(self) -> None:
        if self.publisher is not None:
            await self.publisher.aclose()
        if self.logger is not None:
            self.logger.close()


def _grad_norm(params: list[torch.nn.Parameter], max_norm: float) -> torch.Tensor:
    """The global gradient norm, clipping to ``max_norm`` (0: no clipping). Computed even without
    clipping, because the step is skipped when it is not finite."""
    import torch

    if max_norm:
        return torch.nn.utils.clip_grad_norm_(params, max_norm)
    grads = [p.grad for p in params if p.grad is not None]
    if not grads:
        return torch.zeros(())
    return torch.nn.utils.get_total_norm(grads)


def _on_every_rank_as_on_rank_zero(value: bool, *, sharded: bool) -> bool:
    """Rank 0's ``value`` on every rank of a sharded model (one broadcast; every rank must call this)."""
    if not sharded:
        return value
    import torch.distributed as dist

    box: list[Any] = [value]
    dist.broadcast_object_list(box, src=0)
    return bool(box[0])


def _max_across_ranks(value: int, device: torch.device) -> int:
    import torch
    import torch.distributed as dist

    tensor = torch.tensor([value], device=device)
    dist.all_reduce(tensor, op=dist.ReduceOp.MAX)
    return int(tensor.item())


def _combine_stats(
    means: list[torch.Tensor],
    counts: list[float],
    replicated: list[torch.Tensor],
    *,
    weight: int,
    device: torch.device,
    across_ranks: bool,
) -> tuple[list[float], list[float], list[float]]:
    """Bring a step's stats to the host in one transfer, as floats.

    ``means`` are averages over this rank's ``weight`` items; across ranks they become the item-weighted
    average over every rank's items, ``counts`` become sums, and ``replicated`` values (the same on
    every rank, e.g. the global grad norm) stay as they are. One ``all_reduce`` does all three.
    """
    import torch
    import torch.distributed as dist

    parts = [
        torch.stack([m.detach().float().reshape(()).to(device) for m in means]) * weight,
        # The host-side numbers go to the device in one copy; the 1.0 sums to the number of ranks.
        torch.tensor([float(weight), 1.0, *counts], device=device),
    ]
    if replicated:
        parts.append(torch.stack([r.detach().float().reshape(()).to(device) for r in replicated]))
    packed = torch.cat(parts)
    if across_ranks:
        dist.all_reduce(packed, op=dist.ReduceOp.SUM)
    host = packed.tolist()
    n_means, n_counts = len(means), len(counts)
    total_weight, ranks = host[n_means], host[n_means + 1]
    rest = host[n_means + 2 :]
    return (
        [v / total_weight for v in host[:n_means]],
        rest[:n_counts],
        [v / ranks for v in rest[n_counts:]],
    )


def _memory_stats(device: torch.device) -> dict[str, float]:
    import torch

    if device.type == "cuda":
        return {
            "perf/peak_memory_mb": torch.cuda.max_memory_allocated(device) / 2**20,
            "perf/memory_mb": torch.cuda.memory_allocated(device) / 2**20,
        }
    # ru_maxrss is KiB on Linux, bytes on macOS.
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {"perf/peak_rss_mb": peak / (2**20 if sys.platform == "darwin" else 2**10)}
