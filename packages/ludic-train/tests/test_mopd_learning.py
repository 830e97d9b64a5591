"""CPU learning test for multi-teacher on-policy distillation (``mopd`` + ``TeacherScorer``): a tiny
student learns two tasks, each from its own teacher, and its per-token reverse KL to the right teacher
falls on both, while its KL to the other task's teacher does not.

The models are tiny real ones (``tiny_causal_lm`` on the test BPE tokenizer) made distinct by a few SFT
steps: the "digits" teacher (seed 1) answers task A's prompt with numbers, the "words" teacher (seed 2)
answers task B's prompt with words of the tokenizer's text. Each teacher only ever saw its own prompt
and carries its habit over to the other one, so each is the right teacher for its own task only. The
student (seed 0) was fine-tuned on both kinds of answer for both prompts: it knows both, not which task
wants which. Teachers are served through ``LocalPolicyClient`` and score the student's tokens through
their prompt logprobs. Every step the student (``LocalPolicyClient`` on the trained model, temperature
1, four tokens) answers ``PER_TASK`` requests of each task; each request's meta names its task's
teacher, so ``TeacherScoredBatchSource`` routes every item to it, and ``mopd`` trains on the
reverse KL. Marked ``slow``; it runs in CI with the other learning tests.

Measured (the same seeded run, so the same numbers) is the mean over the first and over the last
``WINDOW`` steps of the per-token reverse-KL estimate ``mean(log π_student − log π_teacher)`` on the
student's own samples, per task, to the right teacher (what is trained) and to the wrong one (the other
task's teacher, scored on the same items, not trained on).
"""

from __future__ import annotations

import random
import statistics
from collections.abc import Sequence
from typing import Any

import pytest
import torch
from toy_rl import CompletionIsActionAgent, any_text_parser

from ludic_core import RolloutSettings
from ludic_core.algorithms import mopd
from ludic_core.batch_sources import RolloutBatchSource
from ludic_core.engine import RolloutEngine
from ludic_core.env import SingleAgentEnv
from ludic_core.inference import InferenceSpec, ReturnSpec, SamplingParams
from ludic_core.protocols.single_agent import SingleAgentProtocol
from ludic_core.requests import EnvSpec, ProtocolSpec, RolloutRequest
from ludic_core.saw import SAWBatch
from ludic_core.teachers import TeacherScoredBatchSource, TeacherScorer
from ludic_core.testing import render_text_dialog
from ludic_core.types import Info, StepOutcome
from ludic_train.config import TrainerConfig
from ludic_train.local_client import LocalPolicyClient
from ludic_train.testing import bpe_tokenizer, tiny_causal_lm
from ludic_train.trainer import Trainer

STEPS = 30
WINDOW = 5
PER_TASK = 32  # samples per task per step
MAX_TOKENS = 4
LR = 5e-3
SEED = 0
SFT_STEPS = 30
SFT_LR = 3e-3

TASKS = {"A": ("Task A: write a number.", "digits"), "B": ("Task B: name some things.", "words")}
WRONG = {"digits": "words", "words": "digits"}
# Words of the tokenizer's training text, so many of the vocabulary's tokens are word pieces the words
# teacher favours (as many of them are number pieces the digits teacher favours).
WORDS = (  # noqa: SIM905 (one line of words reads better than a 35-line list)
    "Natalia Weng Betty Julie James Mark Albert Ken Alexis Tina clips apples books marbles stickers pencils "
    "cookies cards has buys more How many does have now think step by The answer She Board Your move"
).split()

# Per-token reverse KL, first window -> last window, measured with pytest on 2 CPU cores (seed 0; two runs
# gave the same numbers):
#   task A: right teacher (digits) 2.625 -> 0.568   wrong teacher (words)  1.965 -> 6.496
#   task B: right teacher (words)  1.675 -> 0.871   wrong teacher (digits) 2.921 -> 4.112
# With SEED 1 and 2 (the student's initialisation and the sampling seeds) the right teacher's KL fell by
# 3.25 and 2.40 on task A, by 0.87 and 0.87 on task B (the slower one in every run), and the wrong
# teacher's rose on both tasks (by 0.77 to 4.63). The run takes 16-25 s.
MIN_FALL = 0.5  # the right teacher's KL falls at least this much on each task
MIN_GAP = 1.0  # and by at least this much more than the wrong teacher's


class PromptEnv(SingleAgentEnv):
    """One step: shows its prompt, ends on any answer with reward 0 (the teachers give the signal)."""

    def __init__(self, *, prompt: str) -> None:
        super().__init__()
        self._prompt = prompt

    def env_reset(self, *, seed: int | None = None) -> tuple[str, Info]:
        return self._prompt, {}

    def env_step(self, action: str) -> StepOutcome:
        return StepOutcome(obs="", reward=0.0, terminated=True)


def _encode(tok: Any, text: str) -> list[int]:
    return list(tok.encode(text, add_special_tokens=False))


def _answer(kind: str, rng: random.Random) -> str:
    if kind == "digits":
        return " ".join(str(rng.randint(0, 9999)) for _ in range(3))
    return " ".join(rng.choice(WORDS) for _ in range(3))


def _fine_tuned(tok: Any, seed: int, pairs: Sequence[tuple[str, str]]) -> torch.nn.Module:
    """A tiny model fine-tuned for ``SFT_STEPS`` steps to answer each prompt of ``pairs`` (as the agent
    renders it) with answers of the paired kind."""
    model = tiny_causal_lm(tok, seed=seed)
    rng = random.Random(seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=SFT_LR)
    model.train()
    for _ in range(SFT_STEPS):
        rows, prompt_lengths = [], []
        for _ in range(16):
            prompt, kind = rng.choice(pairs)
            prefix = _encode(tok, render_text_dialog([{"role": "user", "content": prompt}]))
            rows.append(prefix + _encode(tok, _answer(kind, rng))[:MAX_TOKENS])
            prompt_lengths.append(len(prefix))
        width = max(map(len, rows))
        ids = torch.tensor([r + [0] * (width - len(r)) for r in rows])
        labels = torch.tensor(
            [
                [-100] * n + r[n:] + [-100] * (width - len(r))
                for r, n in zip(rows, prompt_lengths, strict=True)
            ]
        )
        loss = model(input_ids=ids, labels=labels).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    model.eval()
    return model


class RecordingSource:
    """The scored source, plus each batch's reverse KL to the wrong teacher (scored, not trained on)."""

    def __init__(self, source: TeacherScoredBatchSource, wrong: TeacherScorer) -> None:
        self.source = source
        self.wrong = wrong
        self.metas: list[dict[str, Any]] = []

    async def next_batch(self) -> SAWBatch:
        batch = await self.source.next_batch()
        wrong_meta = (await self.wrong.score_batch(batch)).meta
        meta = {k: v for k, v in batch.meta.items() if k.startswith("teacher_")}
        meta.update({f"wrong/{k}": v for k, v in wrong_meta.items() if k.startswith("teacher_reverse_kl/")})
        self.metas.append(meta)
        return batch


async def _train() -> list[dict[str, Any]]:
    tok = bpe_tokenizer()
    teachers = {
        kind: _fine_tuned(tok, 1 + i, [(prompt, kind)]) for i, (prompt, kind) in enumerate(TASKS.values())
    }
    teacher_clients = {kind: LocalPolicyClient(model, tok, seed=1) for kind, model in teachers.items()}
    # The student knows both kinds of answer but not which task wants which.
    prompts, kinds = [p for p, _ in TASKS.values()], [k for _, k in TASKS.values()]
    student = _fine_tuned(tok, SEED, [(p, k) for p in prompts for k in kinds])
    student.train()
    client = LocalPolicyClient(student, tok, max_batch_size=256)
    algorithm = mopd()
    spec = InferenceSpec(
        sampling=SamplingParams(temperature=1.0, max_tokens=MAX_TOKENS), return_=ReturnSpec.for_rl()
    )

    def protocol() -> SingleAgentProtocol:
        agent = CompletionIsActionAgent(
            client,
            parser=any_text_parser,
            encode=lambda s: _encode(tok, s),
            inference=spec,
            incomplete_completion_penalty=0.0,
        )
        return SingleAgentProtocol(agent)

    def requests(step: int) -> list[RolloutRequest]:
        return [
            RolloutRequest(
                env=EnvSpec("prompt", kwargs={"prompt": prompt}),
                protocol=ProtocolSpec("agent"),
                inference=spec,
                meta={"task": task, "teacher": kind},
            )
            for task, (prompt, kind) in TASKS.items()
            for _ in range(PER_TASK)
        ]

    rollouts = RolloutBatchSource(
        engine=RolloutEngine(
            env_factories={"prompt": PromptEnv}, protocol_factories={"agent": protocol}, base_seed=SEED
        ),
        credit_assigner=algorithm.credit_assigner,
        requests=requests,
        settings=RolloutSettings(max_steps=1, concurrency=64),
    )
    source = RecordingSource(
        TeacherScoredBatchSource(rollouts, TeacherScorer(teacher_clients, concurrency=64)),
        TeacherScorer(teacher_clients, route=lambda item: WRONG[item.meta["teacher"]], concurrency=64),
    )
    trainer = Trainer(
        model=student,
        algorithm=algorithm,
        batch_source=source,
        config=TrainerConfig(pad_token_id=tok, device="cpu", lr=LR, max_seq_len=128, micro_token_budget=4096),
        publisher=client.as_publisher(),
    )
    try:
        await trainer.train(STEPS)
    finally:
        for c in (client, *teacher_clients.values()):
            await c.aclose()
    return source.metas


def _windows(values: list[float]) -> tuple[float, float]:
    assert len(values) == STEPS
    return statistics.mean(values[:WINDOW]), statistics.mean(values[-WINDOW:])


@pytest.mark.slow
async def test_mopd_lowers_the_reverse_kl_to_each_tasks_own_teacher() -> None:
    metas = await _train()
    assert all(m["teacher_items/digits"] == m["teacher_items/words"] == PER_TASK for m in metas)
    report = {}
    for task, (_, kind) in TASKS.items():
        right = _windows([m[f"teacher_reverse_kl/{kind}"] for m in metas])
        # The wrong scorer routes task A's items to the words teacher: its key names that teacher.
        wrong = _windows([m[f"wrong/teacher_reverse_kl/{WRONG[kind]}"] for m in metas])
        report[task] = (right, wrong)
        print(
            f"task {task}: KL to right teacher {right[0]:.3f} -> {right[1]:.3f}, wrong {wrong[0]:.3f} -> {wrong[1]:.3f}"
        )
    for task, ((right_before, right_after), (wrong_before, wrong_after)) in report.items():
        right_fall, wrong_fall = right_before - right_after, wrong_before - wrong_after
        assert right_fall >= MIN_FALL, f"task {task}: (right, wrong) windows {report[task]}"
        # Routing matters: distilling from each task's own teacher moves the student away from the other.
        assert right_fall - wrong_fall >= MIN_GAP, f"task {task}: (right, wrong) windows {report[task]}"
