"""Training-curve plots from the JsonlLogger's own files and from series in memory."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from ludic_core.errors import ConfigError, DataError, MissingExtraError
from ludic_core.loggers.jsonl import JsonlLogger
from ludic_train.plots import (
    MetricSeries,
    Panel,
    ReferenceLine,
    plot_metrics,
    plot_panels,
    read_metric_series,
)

pytest.importorskip("matplotlib")

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def _training_log(path: Path) -> Path:
    """What a run writes: two steps, then a run resumed from step 1 logging step 2 again and step 3."""
    logger = JsonlLogger(path)
    logger.log(1, {"train/loss": 0.9, "train/avg_total_reward": 0.1, "eval/accuracy": 0.2})
    logger.log(2, {"train/loss": 0.8, "train/avg_total_reward": 0.3, "note": "not a number"})
    logger.close()
    resumed = JsonlLogger(path)
    resumed.log(2, {"train/loss": 0.7, "train/avg_total_reward": 0.4})
    resumed.log(3, {"train/loss": 0.5, "train/avg_total_reward": 0.6, "eval/accuracy": 0.5})
    resumed.close()
    return path


def _image(path: Path) -> object:
    from matplotlib.image import imread

    return imread(path)


def test_plot_metrics_writes_a_png_from_the_jsonl_logger_file(tmp_path: Path) -> None:
    log = _training_log(tmp_path / "metrics.jsonl")

    written = plot_metrics(
        log,
        tmp_path / "plots" / "reward.png",
        keys=["train/avg_total_reward", "eval/accuracy"],
        title="toy run",
        references=[ReferenceLine(0.5, "target")],
        ylim=(0, 1),
    )

    assert written == tmp_path / "plots" / "reward.png"
    assert written.read_bytes().startswith(PNG_SIGNATURE)
    pixels = _image(written)
    assert pixels.shape[:2] == (432, 600)  # 3.6 x 5 inches at 120 dpi
    assert pixels.min() < pixels.max()  # something was drawn


def test_read_metric_series_keeps_the_resumed_runs_values(tmp_path: Path) -> None:
    log = _training_log(tmp_path / "metrics.jsonl")

    reward, accuracy = read_metric_series(log, ["train/avg_total_reward", "eval/accuracy"])

    # step 2 was logged twice: the resumed run's later line wins
    assert reward == MetricSeries("train/avg_total_reward", [1, 2, 3], [0.1, 0.4, 0.6])
    # eval metrics only exist on the steps that evaluated
    assert accuracy == MetricSeries("eval/accuracy", [1, 3], [0.2, 0.5])


def test_a_missing_metric_key_names_the_key_and_the_keys_there_are(tmp_path: Path) -> None:
    log = _training_log(tmp_path / "metrics.jsonl")

    with pytest.raises(ConfigError) as error:
        plot_metrics(log, tmp_path / "x.png", keys=["train/avg_total_reward", "eval/win_rate"])

    message = str(error.value)
    assert "'eval/win_rate'" in message
    assert "['eval/accuracy', 'train/avg_total_reward', 'train/loss']" in message
    assert not (tmp_path / "x.png").exists()


def test_a_key_with_only_non_numeric_values_is_missing_too(tmp_path: Path) -> None:
    log = _training_log(tmp_path / "metrics.jsonl")

    with pytest.raises(ConfigError, match="metric 'note' has no numeric value"):
        read_metric_series(log, ["note"])


def test_a_line_that_is_not_a_metrics_record_is_named(tmp_path: Path) -> None:
    log = _training_log(tmp_path / "metrics.jsonl")
    with log.open("a") as file:
        file.write('{"train/loss": 0.1}\n')

    with pytest.raises(DataError, match=r"metrics\.jsonl:5 is not a metrics record"):
        read_metric_series(log, ["train/loss"])

    log.write_text('{"step": 1, "train/loss": 0.1}\n{"step": 2, "train/lo\n')
    with pytest.raises(DataError, match=r"metrics\.jsonl:2 is not JSON"):
        read_metric_series(log, ["train/loss"])


def test_plot_panels_draws_series_from_memory_side_by_side(tmp_path: Path) -> None:
    stages = Panel(
        "Evaluations",
        [MetricSeries("accuracy", [0, 20, 25], [0.1, 0.6, 0.7])],
        references=[ReferenceLine(0.5, "baseline", style=":")],
        xlabel="optimiser step",
        ylim=(0, 1.05),
        step_labels={0: "base", 20: "warm start", 25: "RL"},
    )
    reward = Panel("Reward", [MetricSeries.from_values("train reward", [0.2, None, 0.5, 0.6])])
    assert reward.series[0] == MetricSeries("train reward", [1, 3, 4], [0.2, 0.5, 0.6])

    written = plot_panels([stages, reward], tmp_path / "curves.png", dpi=50)

    assert written.read_bytes().startswith(PNG_SIGNATURE)
    assert _image(written).shape[:2] == (180, 500)  # two 5 x 3.6 inch panels at 50 dpi


def test_plot_metrics_from_memory_refuses_keys(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="source is in memory"):
        plot_metrics([MetricSeries("a", [1], [1.0])], tmp_path / "a.png", keys=["a"])
    with pytest.raises(ConfigError, match="keys must name the metrics"):
        plot_metrics(tmp_path / "metrics.jsonl", tmp_path / "a.png")


def test_a_path_without_an_image_suffix_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"must end in an image format's suffix.*'png'"):
        plot_metrics([MetricSeries("a", [1], [1.0])], tmp_path / "curve.txt")


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: MetricSeries("a", [1, 2], [1.0]), "2 steps but 1 values"),
        (lambda: MetricSeries("a", [], []), "has no points"),
        (lambda: MetricSeries("a", [1], [float("nan")]), "values must be finite numbers, got nan"),
        (lambda: MetricSeries("", [1], [1.0]), "name must be a non-empty str"),
        (lambda: ReferenceLine(float("inf"), "top"), "value must be a finite number, got inf"),
        (lambda: Panel("empty", []), "has no series"),
        (lambda: Panel("p", [MetricSeries("a", [1], [1.0])], ylim=(1, 0)), r"ylim must be \(low, high\)"),
    ],
)
def test_bad_series_and_panels_are_refused_by_name(make: object, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        make()  # type: ignore[operator]


def test_without_matplotlib_the_error_names_the_plot_extra(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # None in sys.modules makes `import matplotlib...` fail as it does when it is not installed.
    for name in [m for m in sys.modules if m == "matplotlib" or m.startswith("matplotlib.")]:
        monkeypatch.setitem(sys.modules, name, None)
    monkeypatch.setitem(sys.modules, "matplotlib", None)

    with pytest.raises(MissingExtraError, match=r'pip install "ludic-train\[plot\]"'):
        plot_metrics([MetricSeries("a", [1], [1.0])], tmp_path / "a.png")
