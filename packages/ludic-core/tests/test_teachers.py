"""TeacherScorer and TeacherScoredBatchSource with scripted teachers whose logprobs are known by hand."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any

import pytest
from core_data_builders import guess_engine

from ludic_core import RolloutSettings
from ludic_core.batch_sources import OfflineBatchSource, RolloutBatchSource
from ludic_core.credit import ConstantCredit
from ludic_core.errors import ConfigError, DataError, LudicTimeoutError, TransportError
from ludic_core.inference import TokenCompletionRequest
from ludic_core.requests import EnvSpec, ProtocolSpec, RolloutRequest
from ludic_core.saw import SAWBatch, SAWItem
from ludic_core.teachers import TeacherScoredBatchSource, TeacherScorer
from ludic_core.testing import ScriptedChatClient, scripted_prompt_logprob
from ludic_core.types import ChatResponse


class RulerTeacher:
    """Gives the token at prompt position ``p`` the logprob ``-scale * p`` (entry ``p - 1``)."""

    def __init__(
        self,
        scale: float,
        *,
        latency_s: float = 0.0,
        prompt_logprobs: Callable[[Sequence[int]], list[float] | None] | None = None,
    ) -> None:
        self.scale = scale
        self.latency_s = latency_s
        self.make = prompt_logprobs
        self.requests: list[TokenCompletionRequest] = []
        self.in_flight = 0
        self.max_in_flight = 0

    async def complete_tokens(self, request: TokenCompletionRequest) -> ChatResponse:
        self.requests.append(request)
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            await asyncio.sleep(self.latency_s)
        finally:
            self.in_flight -= 1
        prompt = request.prompt_token_ids
        values = (
            self.make(prompt) if self.make is not None else [-self.scale * p for p in range(1, len(prompt))]
        )
        response = ChatResponse(text="", prompt_token_ids=prompt, completion_token_ids=[0])
        # Set after construction: a broken teacher's answer, which ChatResponse itself would reject.
        object.__setattr__(response, "prompt_logprobs", None if values is None else tuple(values))
        return response


def item(action_mask: Sequence[int], *, teacher: Any = None, actor: Sequence[float] | None = None) -> SAWItem:
    n = len(action_mask)
    meta = {} if teacher is None else {"teacher": teacher}
    return SAWItem(
        input_ids=list(range(10, 10 + n)),
        action_mask=action_mask,
        weight=1.0,
        meta=meta,
        actor_logps=actor,
    )


async def test_one_teacher_scores_the_action_tokens_from_the_entry_before_them() -> None:
    teacher = ScriptedChatClient(["ok"], cycle=True)
    scorer = TeacherScorer({"only": teacher})
    items = [item([0, 0, 1, 1, 0, 1]), item([0, 1, 0])]
    scored = await scorer.score(items)
    # input_ids are 10, 11, ...: the action token at position p is id 10 + p, scored by entry p - 1.
    assert scored[0].teacher_logps == tuple(scripted_prompt_logprob(p, 10 + p) for p in (2, 3, 5))
    assert scored[1].teacher_logps == (scripted_prompt_logprob(1, 11),)
    assert [s.input_ids for s in scored] == [i.input_ids for i in items]
    request = teacher.requests[0]
    assert request.prompt_token_ids == items[0].input_ids
    assert request.sampling.max_tokens == 1 and request.sampling.temperature == 1.0
    assert request.return_.return_prompt_logprobs and request.seed == 0
    # A bare client is the single teacher; no meta needed either way.
    assert (await TeacherScorer(teacher).score(items))[0].teacher_logps == scored[0].teacher_logps


async def test_items_are_routed_to_their_teacher_by_meta_or_by_a_function() -> None:
    teachers = {"math": RulerTeacher(1.0), "code": RulerTeacher(10.0)}
    items = [
        item([0, 0, 1, 1], teacher="math"),
        item([0, 1, 0, 1], teacher="code"),
        item([0, 0, 0, 1], teacher="math"),
    ]
    scored = await TeacherScorer(teachers).score(items)
    assert [s.teacher_logps for s in scored] == [(-2.0, -3.0), (-10.0, -30.0), (-3.0,)]
    assert len(teachers["math"].requests) == 2 and len(teachers["code"].requests) == 1

    by_length = TeacherScorer(teachers, route=lambda i: "code" if len(i) > 3 else "math")
    assert [s.teacher_logps for s in await by_length.score(items)] == [
        (-20.0, -30.0),
        (-10.0, -30.0),
        (-30.0,),
    ]
    by_key = TeacherScorer(teachers, route_key="task")
    task_item = SAWItem(
        input_ids=[1, 2, 3],
        action_mask=[0, 0, 1],
        weight=0.0,
        meta={"task": "code"},
    )
    assert (await by_key.score([task_item]))[0].teacher_logps == (-20.0,)


async def test_unknown_or_missing_routes_fail_before_any_request_naming_item_value_and_teachers() -> None:
    teachers = {"math": RulerTeacher(1.0), "code": RulerTeacher(10.0)}
    scorer = TeacherScorer(teachers)
    with pytest.raises(
        DataError,
        match=r"item 1: meta\['teacher'\] = 'poetry' names no teacher; known teachers: \['code', 'math'\]",
    ):
        await scorer.score([item([0, 1], teacher="math"), item([0, 1], teacher="poetry")])
    with pytest.raises(
        DataError, match=r"item 0 has no meta\['teacher'\] .* known teachers: \['code', 'math'\]"
    ):
        await scorer.score([item([0, 1])])
    with pytest.raises(DataError, match=r"item 0: route\(item\) = 3 names no teacher"):
        await TeacherScorer(teachers, route=lambda i: 3).score([item([0, 1])])  # type: ignore[arg-type,return-value]
    assert teachers["math"].requests == [] and teachers["code"].requests == []


@pytest.mark.parametrize(
    ("make", "problem"),
    [
        (
            lambda prompt: None,
            r"teacher 't' returned none prompt logprobs for item 0, a sequence of 3 tokens",
        ),
        (lambda prompt: [-1.0], r"teacher 't' returned 1 prompt logprobs for item 0, a sequence of 3 tokens"),
        (lambda prompt: [-1.0, float("nan")], r"action token 0 of item 0 the logprob nan"),
        (lambda prompt: [-1.0, 0.5], r"action token 0 of item 0 the logprob 0.5"),
    ],
)
async def test_a_teacher_without_the_right_prompt_logprobs_is_an_error(
    make: Callable[[Sequence[int]], list[float] | None], problem: str
) -> None:
    scorer = TeacherScorer({"t": RulerTeacher(1.0, prompt_logprobs=make)})
    with pytest.raises(DataError, match=problem):
        await scorer.score([item([0, 0, 1])])


async def test_a_teacher_that_cannot_give_prompt_logprobs_fails_with_the_field_named() -> None:
    class NoPromptLogprobs(ScriptedChatClient):
        async def complete_tokens(self, request: TokenCompletionRequest) -> ChatResponse:
            if request.return_.return_prompt_logprobs:
                raise ConfigError("this client cannot compute return_prompt_logprobs")
            return await super().complete_tokens(request)

    scorer = TeacherScorer({"t": NoPromptLogprobs(["x"], cycle=True)})
    with pytest.raises(ConfigError, match="return_prompt_logprobs") as err:
        await scorer.score([item([0, 1])])
    assert "while teacher 't' scored item 0 (2 tokens)" in "\n".join(err.value.__notes__)


async def test_an_action_token_without_context_cannot_be_scored() -> None:
    with pytest.raises(DataError, match="item 1: its first token is an action token"):
        await TeacherScorer(RulerTeacher(1.0)).score([item([0, 1]), item([1, 1])])


async def test_concurrency_is_bounded_and_each_call_has_a_timeout() -> None:
    teacher = RulerTeacher(1.0, latency_s=0.01)
    scorer = TeacherScorer(teacher, concurrency=3)
    scored = await scorer.score([item([0, 1, 1]) for _ in range(10)])
    assert teacher.max_in_flight == 3 and all(s.teacher_logps == (-1.0, -2.0) for s in scored)

    slow = TeacherScorer({"slow": RulerTeacher(1.0, latency_s=5.0)}, timeout_s=0.05)
    with pytest.raises(LudicTimeoutError, match=r"teacher 'slow' did not score item 0 .* timeout_s=0.05"):
        await asyncio.wait_for(slow.score([item([0, 1])]), 2.0)


async def test_one_failure_cancels_the_other_requests() -> None:
    slow = RulerTeacher(1.0, latency_s=5.0)

    class Broken:
        async def complete_tokens(self, request: TokenCompletionRequest) -> ChatResponse:
            raise TransportError("teacher server down")

    scorer = TeacherScorer({"slow": slow, "broken": Broken()})  # type: ignore[dict-item]
    items = [item([0, 1], teacher="slow"), item([0, 1], teacher="broken")]
    with pytest.raises(TransportError, match="teacher server down"):
        await asyncio.wait_for(scorer.score(items), 2.0)
    assert slow.in_flight == 0  # cancelled, not left running


def test_constructor_validates() -> None:
    teacher = RulerTeacher(1.0)
    with pytest.raises(ConfigError, match="at least one teacher"):
        TeacherScorer({})
    with pytest.raises(ConfigError, match=r"teachers\['t'\] must be a ChatClient"):
        TeacherScorer({"t": object()})  # type: ignore[dict-item]
    with pytest.raises(ConfigError, match="must be a mapping of teacher name to ChatClient"):
        TeacherScorer(42)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="concurrency must be an int >= 1, got 0"):
        TeacherScorer(teacher, concurrency=0)
    with pytest.raises(ConfigError, match="timeout_s must be a finite number > 0, got inf"):
        TeacherScorer(teacher, timeout_s=float("inf"))
    with pytest.raises(ConfigError, match="route must be callable"):
        TeacherScorer(teacher, route="teacher")  # type: ignore[arg-type]


async def test_scored_batch_source_scores_batches_reports_per_teacher_kl_and_passes_state_through() -> None:
    items = [
        item([0, 0, 1, 1], teacher="math", actor=[-1.0, -1.0]),  # math gives -2, -3: KL terms 1, 2
        item([0, 1, 0, 1], teacher="code", actor=[-1.0, -1.0]),  # code gives -10, -30: 9, 29
        item([0, 0, 0, 1], teacher="math"),  # no actor logprobs: counted, not in the KL
    ]
    inner = OfflineBatchSource(items, batch_size=3, shuffle=False)
    source = TeacherScoredBatchSource(
        inner, TeacherScorer({"math": RulerTeacher(1.0), "code": RulerTeacher(10.0)})
    )
    batch = await source.next_batch()
    assert [i.teacher_logps for i in batch.items] == [(-2.0, -3.0), (-10.0, -30.0), (-3.0,)]
    assert batch.meta["source"] == "offline" and batch.meta["num_samples"] == 3
    assert batch.meta["teacher_items/math"] == 2 and batch.meta["teacher_items/code"] == 1
    assert batch.meta["teacher_reverse_kl/math"] == pytest.approx(1.5)
    assert batch.meta["teacher_reverse_kl/code"] == pytest.approx(19.0)
    assert source.state_dict() == inner.state_dict() == {"epoch": 0, "position": 3, "seed": 0, "num_items": 3}
    source.load_state_dict({"epoch": 2, "position": 1, "seed": 0, "num_items": 3})
    assert (inner.epoch, inner.position) == (2, 1)

    class Stateless:
        async def next_batch(self) -> SAWBatch:
            return SAWBatch(items=[item([0, 1])])

    bare = TeacherScoredBatchSource(Stateless(), TeacherScorer(RulerTeacher(1.0)))
    assert (await bare.next_batch()).items[0].teacher_logps == (-1.0,)
    assert bare.state_dict() == {}
    bare.load_state_dict({})
    with pytest.raises(
        ConfigError, match=r"state has keys \['step'\], but the wrapped source Stateless keeps no state"
    ):
        bare.load_state_dict({"step": 3})
    with pytest.raises(ConfigError, match="must be a TeacherScorer"):
        TeacherScoredBatchSource(inner, RulerTeacher(1.0))  # type: ignore[arg-type]


async def test_rollout_request_meta_routes_every_item_of_its_episode() -> None:
    teachers = {"easy": ScriptedChatClient(["x"], cycle=True), "hard": RulerTeacher(1.0)}

    def requests(step: int) -> list[RolloutRequest]:
        return [
            RolloutRequest(
                env=EnvSpec("guess", {"max_number": n}), protocol=ProtocolSpec("single"), meta={"teacher": t}
            )
            for n, t in ((3, "easy"), (9, "hard"), (3, "easy"))
        ]

    source = TeacherScoredBatchSource(
        RolloutBatchSource(
            engine=guess_engine(),
            credit_assigner=ConstantCredit(1.0),
            requests=requests,
            settings=RolloutSettings(max_steps=3),
        ),
        TeacherScorer(teachers),
    )
    batch = await source.next_batch()
    assert {i.meta["teacher"] for i in batch.items} == {"easy", "hard"}
    for scored in batch.items:
        positions = [p for p, a in enumerate(scored.action_mask) if a]
        if scored.meta["teacher"] == "hard":
            expected = tuple(-1.0 * p for p in positions)
        else:
            expected = tuple(scripted_prompt_logprob(p, scored.input_ids[p]) for p in positions)
        assert scored.teacher_logps == expected
    assert batch.meta["step"] == 0 and source.state_dict()["step"] == 1
