"""examples/selfplay.py with a tiny random model: the whole run (warm start, self-play GRPO through
``MultiAgentProtocol``, evaluations, head-to-head) in seconds, and the pieces its numbers rest on. Whether
self-play learns is checked on SmolLM2 by ``nox -s selfplay`` (``--smoke --check``)."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import sys
from pathlib import Path
from types import ModuleType

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

pytest.importorskip("peft")
pytest.importorskip("ludic_envs")
pytest.importorskip("ludic_agents")

SCRIPT = Path(__file__).resolve().parents[2] / "examples" / "selfplay.py"


@pytest.fixture(scope="module")
def selfplay() -> ModuleType:
    sys.path.insert(0, str(SCRIPT.parent / "tic_tac_toe"))
    spec = importlib.util.spec_from_file_location("selfplay_example", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_tiny_run_end_to_end(selfplay: ModuleType, tmp_path: Path) -> None:
    args = selfplay.parse_args(
        [
            "--model", "tiny", "--teacher-games", "4", "--sft-steps", "2", "--steps", "2",
            "--groups-per-step", "2", "--group-size", "2", "--eval-positions", "6", "--eval-games", "4",
            "--match-pairs", "3", "--threads", "1", "--out", str(tmp_path),
        ]
    )  # fmt: skip
    summary = asyncio.run(selfplay.main(args))
    assert json.loads((tmp_path / "summary.json").read_text()) == summary
    assert len(summary["train_reward"]) == 2
    match = summary["head_to_head"]
    assert match["pairs"] == 3 and match["low"] <= match["points_mean"] <= match["high"]
    assert set(summary["gain_over_warm_start"]) == {"optimal_move", "sampled_game_points"}
    # Every self-play game left one rollout per seat, grouped by (group, seat) for the credit.
    rollouts = [json.loads(line) for line in (tmp_path / "rollouts.jsonl").read_text().splitlines()]
    trained = [r for r in rollouts if r["meta"].get("group_id")]
    assert trained and {r["meta"]["agent_id"] for r in trained} == {"x", "o"}


def _record(seat: str, **fields: object) -> dict[str, object]:
    return {"agent_id": seat, **fields}


def test_seat_points(selfplay: ModuleType) -> None:
    points = selfplay.seat_points
    assert points([_record("x", result="win"), _record("o", result="loss")]) == {"x": 1.0, "o": 0.0}
    assert points([_record("x", result="draw"), _record("o", result="draw")]) == {"x": 0.5, "o": 0.5}
    # A seat that moves illegally or out of format forfeits, whatever the other's record says.
    assert points([_record("x", illegal_reason="B2 is occupied"), _record("o", result="win")]) == {
        "x": 0.0,
        "o": 1.0,
    }
    assert points([_record("x"), _record("o", parse_error=True)]) == {"x": 1.0, "o": 0.0}
    with pytest.raises(ValueError, match="seats"):
        points([_record("x", result="win")])


def test_frozen_copy_shares_the_base_and_owns_its_adapters(selfplay: ModuleType) -> None:
    import torch
    from lora_run import load_lora_model  # on sys.path once the script is loaded

    args = selfplay.parse_args(["--model", "tiny"])
    model, _tokenizer = load_lora_model(args)
    copy = selfplay.frozen_copy(model)
    frozen = dict(model.named_parameters())
    for name, p in copy.named_parameters():
        assert not p.requires_grad
        if frozen[name].requires_grad:
            assert p.data_ptr() != frozen[name].data_ptr()
        else:
            assert p is frozen[name]
    adapter = next(name for name, p in frozen.items() if p.requires_grad)
    before = dict(copy.named_parameters())[adapter].clone()
    with torch.no_grad():
        frozen[adapter].add_(1.0)  # training moves the live adapters ...
    assert torch.equal(dict(copy.named_parameters())[adapter], before)  # ... not the warm start's
