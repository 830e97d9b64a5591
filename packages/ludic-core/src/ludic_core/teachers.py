"""Teacher logprobs for distillation: one or more teacher models score a student's SAW items.

:class:`TeacherScorer` fills ``SAWItem.teacher_logps`` (what the reverse-KL loss reads) by asking a
teacher (any :class:`~ludic_core.inference.ChatClient` with ``ReturnSpec.return_prompt_logprobs``) for
the prompt logprobs of the item's whole sequence: the action token at ``p`` is scored by entry ``p - 1``.
The teacher sees the student's tokens, so both must share a tokenizer. With several teachers (MOPD)
each item goes to the one its ``meta["teacher"]`` names, set through
``RolloutRequest(..., meta={"teacher": "math"})``. :class:`TeacherScoredBatchSource` scores every batch
of any batch source before the trainer sees it.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs

from ludic_core.errors import ConfigError, DataError, LudicTimeoutError
from ludic_core.inference import ChatClient, ReturnSpec, SamplingParams, TokenCompletionRequest
from ludic_core.logs import get_logger
from ludic_core.rollout_settings import DEFAULT_MODEL_CALL_TIMEOUT_S
from ludic_core.saw import BatchSource, SAWBatch, SAWItem
from ludic_core.validation import check_int, check_number

__all__ = ["TeacherScoredBatchSource", "TeacherScorer"]

log = get_logger(__name__)

Route = Callable[[SAWItem], str]
"""Picks the name of an item's teacher."""

# Teachers only score: one throw-away token, sampled from the plain distribution with a fixed seed so
# that scoring never draws from a client's own RNG.
_SCORING_SAMPLING = SamplingParams(temperature=1.0, max_tokens=1)
_SCORING_RETURN = ReturnSpec(return_prompt_logprobs=True)
_SCORING_SEED = 0


class TeacherScorer:
    """Fill ``teacher_logps`` on SAW items, each scored by its own teacher.

    Args:
        teachers: teacher name → client. With one teacher every item goes to it and no routing is
            needed; a bare client is the single teacher ``"teacher"``.
        route_key: with several teachers, the item meta key that names an item's teacher.
        route: instead of ``route_key``, a function ``item -> teacher name``.
        concurrency: the most scoring requests in flight at once (over all teachers); it also bounds
            how many sequences an in-process teacher scores in one batch.
        timeout_s: the longest one scoring request may take.

    Each item is one request: the item's ``input_ids`` as the prompt, ``max_tokens=1``, temperature 1,
    ``return_prompt_logprobs=True``. Every route is resolved before any request is sent; an item whose
    route names no teacher raises a :class:`DataError` naming the item's index, the route value and
    the known teachers. A teacher that returns no prompt logprobs, the wrong number, or a non-finite or
    positive one is an error too, as is an action token at position 0 (no context to score it from).
    """

    def __init__(
        self,
        teachers: Mapping[str, ChatClient] | ChatClient,
        *,
        route_key: str = "teacher",
        route: Route | None = None,
        concurrency: int = 16,
        timeout_s: float = DEFAULT_MODEL_CALL_TIMEOUT_S,
    ) -> None:
        if isinstance(teachers, Mapping):
            table = dict(teachers)
        elif isinstance(teachers, ChatClient):
            table = {"teacher": teachers}
        else:
            raise ConfigError(
                "TeacherScorer.teachers must be a mapping of teacher name to ChatClient, or one ChatClient; "
                f"got {type(teachers).__name__}"
            )
        if not table:
            raise ConfigError("TeacherScorer.teachers must name at least one teacher")
        for name, client in table.items():
            if not isinstance(name, str) or not name:
                raise ConfigError(f"TeacherScorer.teachers: names must be non-empty strings, got {name!r}")
            if not isinstance(client, ChatClient):
                raise ConfigError(
                    f"TeacherScorer.teachers[{name!r}] must be a ChatClient (with complete_tokens), "
                    f"got {type(client).__name__}"
                )
        if not isinstance(route_key, str) or not route_key:
            raise ConfigError(f"TeacherScorer.route_key must be a non-empty str, got {route_key!r}")
        if route is not None and not callable(route):
            raise ConfigError(f"TeacherScorer.route must be callable (item -> teacher name), got {route!r}")
        check_int("TeacherScorer.concurrency", concurrency, 1)
        check_number("TeacherScorer.timeout_s", timeout_s, minimum=0, exclusive=True)
        self.teachers: dict[str, ChatClient] = table
        self.route_key = route_key
        self.route = route
        self.concurrency = concurrency
        self.timeout_s = float(timeout_s)

    @property
    def teacher_names(self) -> list[str]:
        return sorted(self.teachers)

    def teacher_of(self, index: int, item: SAWItem) -> str:
        """The name of the teacher that scores ``item`` (``index`` is its position, for errors)."""
        if self.route is None and len(self.teachers) == 1:
            return next(iter(self.teachers))
        if self.route is not None:
            value: Any = self.route(item)
            where = "route(item)"
        else:
            if self.route_key not in item.meta:
                raise DataError(
                    f"item {index} has no meta[{self.route_key!r}] to pick its teacher by; known teachers: "
                    f"{self.teacher_names} (set it through RolloutRequest.meta, or pass route=)"
                )
            value = item.meta[self.route_key]
            where = f"meta[{self.route_key!r}]"
        if not isinstance(value, str) or value not in self.teachers:
            raise DataError(
                f"item {index}: {where} = {value!r} names no teacher; known teachers: {self.teacher_names}"
            )
        return value

    async def score(self, items: Sequence[SAWItem]) -> list[SAWItem]:
        """The items with ``teacher_logps`` set (any previous value is replaced), in order."""
        names = [self.teacher_of(i, item) for i, item in enumerate(items)]
        for i, item in enumerate(items):
            if item.action_mask and item.action_mask[0]:
                raise DataError(
                    f"item {i}: its first token is an action token; no teacher can score a token "
                    "without context"
                )
        semaphore = asyncio.Semaphore(self.concurrency)
        tasks = [
            asyncio.ensure_future(self._score_one(i, item, names[i], semaphore))
            for i, item in enumerate(items)
        ]
        try:
            scored = await asyncio.gather(*tasks)
        except BaseException:
            # One failure fails the batch: the other requests are not left running.
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            raise
        return [attrs.evolve(item, teacher_logps=logps) for item, logps in zip(items, scored, strict=True)]

    async def _score_one(
        self, index: int, item: SAWItem, name: str, semaphore: asyncio.Semaphore
    ) -> list[float]:
        request = TokenCompletionRequest(
            prompt_token_ids=item.input_ids,
            sampling=_SCORING_SAMPLING,
            return_=_SCORING_RETURN,
            seed=_SCORING_SEED,
        )
        async with semaphore:
            try:
                response = await asyncio.wait_for(
                    self.teachers[name].complete_tokens(request), timeout=self.timeout_s
                )
            except LudicTimeoutError as exc:  # the client's own bound, not ours
                exc.add_note(f"while teacher {name!r} scored item {index} ({len(item)} tokens)")
                raise
            except TimeoutError as exc:
                raise LudicTimeoutError(
                    f"teacher {name!r} did not score item {index} ({len(item)} tokens) within "
                    f"timeout_s={self.timeout_s:g}"
                ) from exc
            except Exception as exc:
                exc.add_note(f"while teacher {name!r} scored item {index} ({len(item)} tokens)")
                raise
        values = response.prompt_logprobs
        if values is None or len(values) != len(item) - 1:
            got = "none" if values is None else f"{len(values)}"
            raise DataError(
                f"teacher {name!r} returned {got} prompt logprobs for item {index}, a sequence of {len(item)} "
                f"tokens; a teacher must return one per token after the first (ReturnSpec.return_prompt_logprobs)"
            )
        picked = [values[p - 1] for p, is_action in enumerate(item.action_mask) if is_action]
        bad = next(((k, v) for k, v in enumerate(picked) if not (math.isfinite(v) and v <= 1e-6)), None)
        if bad is not None:
            raise DataError(
                f"teacher {name!r} gave action token {bad[0]} of item {index} the logprob {bad[1]!r}; "
                "logprobs must be finite and <= 0"
            )
        return [min(v, 0.0) for v in picked]

    async def score_batch(self, batch: SAWBatch) -> SAWBatch:
        """The batch with every item scored, and per-teacher counts in its meta: ``teacher_items/<name>``
        and, over the items that carry the student's ``actor_logps``, ``teacher_reverse_kl/<name>``
        (the mean over their action tokens of ``actor_logp − teacher_logp``, an estimate of the
        per-token reverse KL from the student to that teacher)."""
        items = await self.score(batch.items)
        meta = dict(batch.meta)
        by_teacher: dict[str, list[SAWItem]] = {}
        for i, item in enumerate(items):
            by_teacher.setdefault(self.teacher_of(i, item), []).append(item)
        for name, group in sorted(by_teacher.items()):
            meta[f"teacher_items/{name}"] = len(group)
            diffs = [
                a - t
                for item in group
                if item.actor_logps is not None and item.teacher_logps is not None
                for a, t in zip(item.actor_logps, item.teacher_logps, strict=True)
            ]
            if diffs:
                meta[f"teacher_reverse_kl/{name}"] = sum(diffs) / len(diffs)
        log.debug("teachers.scored", items=len(items), teachers={k: len(v) for k, v in by_teacher.items()})
        return SAWBatch(items=items, meta=meta)


class TeacherScoredBatchSource:
    """A :class:`~ludic_core.saw.BatchSource` whose batches are ``source``'s, scored by ``scorer``.

    ``state_dict`` and ``load_state_dict`` are the wrapped source's (scoring keeps no state), so a
    resumed run picks up where the wrapped source stopped; a source without them has the empty state.
    """

    def __init__(self, source: BatchSource, scorer: TeacherScorer) -> None:
        if not callable(getattr(source, "next_batch", None)):
            raise ConfigError(f"TeacherScoredBatchSource.source must be a BatchSource, got {source!r}")
        if not isinstance(scorer, TeacherScorer):
            raise ConfigError(f"TeacherScoredBatchSource.scorer must be a TeacherScorer, got {scorer!r}")
        self.source = source
        self.scorer = scorer

    async def next_batch(self) -> SAWBatch:
        return await self.scorer.score_batch(await self.source.next_batch())

    def state_dict(self) -> dict[str, Any]:
        state = getattr(self.source, "state_dict", None)
        return dict(state()) if callable(state) else {}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        load = getattr(self.source, "load_state_dict", None)
        if callable(load):
            load(state)
        elif state:
            raise ConfigError(
                f"state has keys {sorted(state)}, but the wrapped source {type(self.source).__name__} keeps "
                "no state; resume with the kind of source that saved it"
            )
