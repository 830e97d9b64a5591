"""Training curves as image files (``pip install "ludic-train[plot]"``).

:func:`plot_metrics` draws metric curves over steps into one panel, from a
:class:`~ludic_core.loggers.jsonl.JsonlLogger` file or in-memory :class:`MetricSeries`::

    plot_metrics("run/metrics.jsonl", "run/reward.png", keys=["train/avg_total_reward"])

:func:`plot_panels` draws several :class:`Panel` side by side, with optional :class:`ReferenceLine` s;
both return the path written, and :func:`draw_panels` returns the ``Figure``. Only matplotlib's Agg
canvas is used, never ``pyplot``: plotting needs no display and leaves a notebook's backend alone.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, TypeGuard

import attrs

from ludic_core.errors import ConfigError, DataError, missing_extra
from ludic_core.validation import check_int

__all__ = [
    "MetricSeries",
    "Panel",
    "ReferenceLine",
    "draw_panels",
    "plot_metrics",
    "plot_panels",
    "read_metric_series",
]

# Keys every JsonlLogger line has besides the metrics themselves.
_RECORD_KEYS = frozenset({"step", "time"})


def _finite_number(value: object) -> TypeGuard[float]:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _non_empty_str(owner: str) -> Any:
    def check(_instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
        if not isinstance(value, str) or not value:
            raise ConfigError(f"{owner}.{attribute.name} must be a non-empty str, got {value!r}")

    return check


def _number_tuple(values: Sequence[float]) -> tuple[float, ...]:
    return tuple(values)


@attrs.frozen
class MetricSeries:
    """One curve: ``values[i]`` was measured at ``steps[i]``; ``name`` labels it in the legend."""

    name: str = attrs.field(validator=_non_empty_str("MetricSeries"))
    steps: tuple[float, ...] = attrs.field(converter=_number_tuple)
    values: tuple[float, ...] = attrs.field(converter=_number_tuple)

    def __attrs_post_init__(self) -> None:
        if len(self.steps) != len(self.values):
            raise ConfigError(
                f"MetricSeries {self.name!r}: {len(self.steps)} steps but {len(self.values)} values"
            )
        if not self.steps:
            raise ConfigError(f"MetricSeries {self.name!r} has no points")
        for field, numbers in (("steps", self.steps), ("values", self.values)):
            bad = next((x for x in numbers if not _finite_number(x)), None)
            if bad is not None:
                raise ConfigError(f"MetricSeries {self.name!r}: {field} must be finite numbers, got {bad!r}")

    @classmethod
    def from_values(cls, name: str, values: Sequence[float | None], *, first_step: int = 1) -> MetricSeries:
        """A curve from one value per step, starting at ``first_step``; ``None`` marks a step that has
        no value (e.g. ``step_result.get(key)`` for a metric not logged every step) and is left out."""
        points = [(first_step + i, v) for i, v in enumerate(values) if v is not None]
        return cls(name, [s for s, _ in points], [v for _, v in points])


@attrs.frozen
class ReferenceLine:
    """A horizontal line across a panel at ``value``; ``style`` is a matplotlib line style."""

    value: float = attrs.field()
    label: str = attrs.field(validator=_non_empty_str("ReferenceLine"))
    style: str = "--"

    @value.validator
    def _check_value(self, _attribute: attrs.Attribute[float], value: object) -> None:
        if not _finite_number(value):
            raise ConfigError(f"ReferenceLine {self.label!r}: value must be a finite number, got {value!r}")


def _series_tuple(series: Sequence[MetricSeries]) -> tuple[MetricSeries, ...]:
    return tuple(series)


def _references_tuple(references: Sequence[ReferenceLine]) -> tuple[ReferenceLine, ...]:
    return tuple(references)


@attrs.frozen
class Panel:
    """One set of axes: curves over a shared step axis, and reference lines across it.

    ``step_labels`` names tick positions on the step axis (e.g. the stages of a run at the steps
    where each began) instead of plain numbers; ``ylim`` fixes the value axis (e.g. ``(0, 1.05)`` for
    rates) and ``ylabel`` names it.
    """

    title: str
    series: tuple[MetricSeries, ...] = attrs.field(converter=_series_tuple)
    references: tuple[ReferenceLine, ...] = attrs.field(default=(), converter=_references_tuple)
    xlabel: str = "step"
    ylim: tuple[float, float] | None = None
    step_labels: Mapping[float, str] | None = None
    ylabel: str = ""

    def __attrs_post_init__(self) -> None:
        if not self.series:
            raise ConfigError(f"Panel {self.title!r} has no series to plot")
        for item in (*self.series, *self.references):
            if not isinstance(item, (MetricSeries, ReferenceLine)):
                raise ConfigError(
                    f"Panel {self.title!r}: series must be MetricSeries and references ReferenceLine, "
                    f"got {type(item).__name__}"
                )
        if self.ylim is not None and not (
            len(self.ylim) == 2 and all(_finite_number(y) for y in self.ylim) and self.ylim[0] < self.ylim[1]
        ):
            raise ConfigError(
                f"Panel {self.title!r}: ylim must be (low, high) with low < high, got {self.ylim!r}"
            )


def read_metric_series(path: str | os.PathLike[str], keys: Sequence[str]) -> list[MetricSeries]:
    """Each key's curve from a :class:`~ludic_core.loggers.jsonl.JsonlLogger` file, in ``keys`` order.

    A line contributes a point to a key when it holds a finite number for it. A resumed run appends
    to the same file and logs the steps after its checkpoint again: for a step logged more than once
    the later line wins, so the curve is the one the run finally took. Raises :class:`ConfigError`
    naming the key and the metric keys the file has when a key has no number in the file, and
    :class:`DataError` naming the line when the file is not JSONL written by the logger.
    """
    path = Path(path)
    if isinstance(keys, str) or not keys:
        raise ConfigError(f"read_metric_series: keys must be a non-empty list of metric keys, got {keys!r}")
    points: dict[str, dict[float, float]] = {key: {} for key in keys}
    seen: set[str] = set()
    with path.open(encoding="utf-8") as file:
        for number, line in enumerate(file, start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                raise DataError(f"{path}:{number} is not JSON ({exc.msg}): {line[:80]!r}") from exc
            if not isinstance(record, dict) or not _finite_number(record.get("step")):
                raise DataError(
                    f"{path}:{number} is not a metrics record with a numeric 'step': {line[:80]!r}"
                )
            seen.update(k for k, v in record.items() if _finite_number(v))
            for key, curve in points.items():
                value = record.get(key)
                if _finite_number(value):
                    curve[record["step"]] = value
    available = sorted(seen - _RECORD_KEYS)
    for key, curve in points.items():
        if not curve:
            raise ConfigError(
                f"metric {key!r} has no numeric value in {path}; the metric keys there are {available}"
            )
    return [
        MetricSeries(key, sorted(curve), [curve[step] for step in sorted(curve)])
        for key, curve in points.items()
    ]


def plot_metrics(
    source: str | os.PathLike[str] | Sequence[MetricSeries],
    path: str | os.PathLike[str],
    *,
    keys: Sequence[str] | None = None,
    title: str = "",
    references: Sequence[ReferenceLine] = (),
    xlabel: str = "step",
    ylim: tuple[float, float] | None = None,
    dpi: int = 120,
) -> Path:
    """Draw curves into one panel and write the figure to ``path`` (the format follows its suffix).

    ``source`` is a JsonlLogger file (``keys`` names the metrics to draw) or curves in memory
    (:class:`MetricSeries`, with ``keys`` left out). Returns ``path``.
    """
    if isinstance(source, (str, os.PathLike)):
        if keys is None:
            raise ConfigError(f"plot_metrics: keys must name the metrics to draw from {os.fspath(source)}")
        series = read_metric_series(source, keys)
    else:
        if keys is not None:
            raise ConfigError(
                f"plot_metrics: keys={keys!r} selects metrics from a file, but source is in memory"
            )
        series = list(source)
    panel = Panel(title, series, references=references, xlabel=xlabel, ylim=ylim)
    return plot_panels([panel], path, dpi=dpi)


def plot_panels(
    panels: Sequence[Panel],
    path: str | os.PathLike[str],
    *,
    dpi: int = 120,
    panel_size: tuple[float, float] = (5.0, 3.6),
) -> Path:
    """Draw ``panels`` side by side (``panel_size`` inches each) and write the figure to ``path``.

    The format follows the suffix of ``path`` (``.png``, ``.svg``, ``.pdf``, …); missing parent
    folders are created. Returns ``path``.
    """
    check_int("plot_panels: dpi", dpi, 1)
    path = Path(path)
    figure = draw_panels(panels, panel_size=panel_size)
    formats = figure.canvas.get_supported_filetypes()
    if path.suffix.lstrip(".").lower() not in formats:
        raise ConfigError(
            f"plot path {str(path)!r} must end in an image format's suffix, one of {sorted(formats)}"
        )
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=dpi)
    return path


def draw_panels(panels: Sequence[Panel], *, panel_size: tuple[float, float] = (5.0, 3.6)) -> Any:
    """The matplotlib ``Figure`` (on an Agg canvas) of ``panels`` side by side, ``panel_size`` inches
    each: one ``Axes`` per panel, in order, with the panel's title, axis labels, curves and reference
    lines (each a ``Line2D`` labelled for the legend)."""
    panels = list(panels)
    if not panels:
        raise ConfigError("plot_panels: panels must hold at least one Panel, got none")
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError as exc:
        raise missing_extra("ludic-train", "plot", "matplotlib") from exc

    width, height = panel_size
    figure = Figure(figsize=(width * len(panels), height))
    FigureCanvasAgg(figure)  # attaches itself to the figure: savefig and canvas queries use it
    for axes, panel in zip(figure.subplots(1, len(panels), squeeze=False)[0], panels, strict=True):
        _draw(axes, panel)
    figure.tight_layout()
    return figure


def _draw(axes: Any, panel: Panel) -> None:
    # Markers on every curve: an evaluation curve often has only a handful of points.
    for series in panel.series:
        axes.plot(
            series.steps, series.values, marker="o" if len(series.steps) < 20 else ".", label=series.name
        )
    for line in panel.references:
        axes.axhline(line.value, linestyle=line.style, color="grey", label=line.label)
    if panel.step_labels:
        ticks = sorted(panel.step_labels)
        axes.set_xticks(ticks, [panel.step_labels[t] for t in ticks])
    elif all(float(step).is_integer() for series in panel.series for step in series.steps):
        from matplotlib.ticker import MaxNLocator

        # Trainer steps are whole numbers: no tick at step 1.25.
        axes.xaxis.set_major_locator(MaxNLocator(integer=True))
    if panel.ylim is not None:
        axes.set_ylim(*panel.ylim)
    if panel.title:
        axes.set_title(panel.title)
    axes.set_xlabel(panel.xlabel)
    if panel.ylabel:
        axes.set_ylabel(panel.ylabel)
    axes.legend(fontsize=7)
