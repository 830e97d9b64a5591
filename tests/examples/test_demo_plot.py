"""The CPU demo's figure (examples/demo.py), drawn by ludic_train.plots from small synthetic results
shaped like a real run's: its evaluations and a metrics JSONL in which the warm start's and GRPO's
trainers both count their steps from 1. The panels' data, then the drawn figure itself: its axis labels
and the yardsticks' lines."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

pytest.importorskip("matplotlib")

DEMO = Path(__file__).resolve().parents[2] / "examples" / "demo.py"


def _demo() -> ModuleType:
    spec = importlib.util.spec_from_file_location("ludic_demo", DEMO)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _evals() -> dict[str, dict[str, Any]]:
    def result(legal: float, optimal: float, points: float | None) -> dict[str, Any]:
        games = {} if points is None else {"sampled_games": {"points_mean": points}}
        return {"positions": {"legal_move_rate": legal, "optimal_move_rate": optimal}, **games}

    return {
        "random legal": result(1.0, 0.40, 0.51),
        "perfect": result(1.0, 1.0, 0.95),
        "base model": result(0.0, 0.0, None),
        "warm start": result(0.98, 0.55, 0.23),
        "GRPO step 2": result(1.0, 0.56, 0.42),
        "GRPO": result(1.0, 0.57, 0.56),
    }


def _metrics(path: Path) -> Path:
    from ludic_core.loggers.jsonl import JsonlLogger

    logger = JsonlLogger(path)
    for step in range(1, 4):  # the warm start: SFT batches carry no reward
        logger.log(step, {"train/loss": 2.0 / step, "train/grad_norm": 1.0})
    for step, reward in enumerate([0.2, 0.35, 0.5], start=1):  # GRPO, counting from 1 again
        logger.log(step, {"train/loss": 0.1, "train/avg_total_reward": reward})
    logger.close()
    return path


def test_the_demo_figure_shows_points_per_game_positions_and_grpo_reward_beside_the_yardsticks(
    tmp_path: Path,
) -> None:
    demo = _demo()
    metrics = _metrics(tmp_path / "metrics.jsonl")
    eval_steps = {"warm start": 0, "GRPO step 2": 2, "GRPO": 3}

    points, positions, training = demo.evaluation_panels(_evals(), metrics, eval_steps)

    [model] = points.series
    assert (model.steps, model.values) == ((0, 2, 3), (0.23, 0.42, 0.56))
    assert [(r.label, r.value) for r in points.references] == [
        ("random legal player", 0.51),
        ("perfect player", 0.95),
    ]
    assert points.ylabel and positions.ylabel and training.ylabel
    legal, optimal = positions.series
    assert (legal.name, legal.steps, legal.values) == ("legal move rate", (0, 2, 3), (0.98, 1.0, 1.0))
    assert (optimal.name, optimal.values) == ("optimal move rate", (0.55, 0.56, 0.57))
    assert [(r.label, r.value, r.style) for r in positions.references] == [
        ("random legal: optimal-move rate", 0.40, ":"),
        ("perfect: optimal-move rate", 1.0, "--"),
    ]
    [reward] = training.series
    assert (reward.steps, reward.values) == ((1, 2, 3), (0.2, 0.35, 0.5))  # GRPO's steps only

    written = demo.plot_evaluations(_evals(), metrics, eval_steps, tmp_path / "eval_curve.png")
    assert written == tmp_path / "eval_curve.png"
    assert written.read_bytes().startswith(b"\x89PNG\r\n\x1a\n")


def test_the_drawn_figure_leads_with_points_per_game_and_labels_every_axis(tmp_path: Path) -> None:
    from ludic_train.plots import draw_panels

    demo = _demo()
    metrics = _metrics(tmp_path / "metrics.jsonl")
    eval_steps = {"warm start": 0, "GRPO step 2": 2, "GRPO": 3}

    figure = draw_panels(demo.evaluation_panels(_evals(), metrics, eval_steps))

    headline, positions, training = figure.axes
    assert headline.get_title() == "Points per game vs a random opponent"
    for axes in figure.axes:
        assert axes.get_xlabel() and axes.get_ylabel(), axes.get_title()
    assert "points per game" in headline.get_ylabel()
    lines = {line.get_label(): line for line in headline.get_lines()}
    assert list(lines["model, T = 1"].get_xdata()) == [0, 2, 3]
    assert list(lines["model, T = 1"].get_ydata()) == [0.23, 0.42, 0.56]
    # The yardsticks are horizontal lines at the values the evaluation measured for those players.
    for label, value in (("random legal player", 0.51), ("perfect player", 0.95)):
        assert set(lines[label].get_ydata()) == {value}, label
    legend = headline.get_legend()
    assert legend is not None
    assert {t.get_text() for t in legend.get_texts()} == {
        "model, T = 1",
        "random legal player",
        "perfect player",
    }
    assert {line.get_label() for line in positions.get_lines()} >= {"legal move rate", "optimal move rate"}
    assert [line.get_label() for line in training.get_lines()] == ["train: mean game reward"]
