"""Load QA datasets through Hugging Face ``datasets`` (the ``hf`` extra), once per process.

Users name hub datasets (``openai/gsm8k``); tests and offline runs pass local files (``data_files=``)
that go through the same ``datasets`` loaders. Loaded datasets are cached per process, so envs that
are built fresh for every episode (as the rollout engine does) do not reload anything.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, TypeAlias

from ludic_core.errors import ConfigError, DataError, missing_extra
from ludic_core.logs import get_logger

__all__ = ["DataFiles", "load_rows"]

log = get_logger(__name__)

DataFiles: TypeAlias = str | Path | Sequence[str | Path] | Mapping[str, str | Path | Sequence[str | Path]]

_LOADERS = {".json": "json", ".jsonl": "json", ".parquet": "parquet", ".csv": "csv"}
_CacheKey = tuple[str, str | None, str, tuple[tuple[str, tuple[str, ...]], ...] | None]
_cache: dict[_CacheKey, Any] = {}
_lock = threading.Lock()


def _file_list(value: str | Path | Sequence[str | Path], field: str) -> tuple[str, ...]:
    if isinstance(value, (str, Path)):
        return (str(value),)
    files = tuple(str(v) for v in value)
    if not files:
        raise ConfigError(f"{field} is an empty list of files")
    return files


def _normalise_files(data_files: DataFiles, split: str) -> tuple[tuple[str, tuple[str, ...]], ...]:
    if isinstance(data_files, Mapping):
        items = {str(k): _file_list(v, f"data_files[{k!r}]") for k, v in data_files.items()}
    else:
        items = {split: _file_list(data_files, "data_files")}
    if split not in items:
        raise ConfigError(f"split {split!r} is not in data_files (splits given: {sorted(items)})")
    for files in items.values():
        for f in files:
            if not Path(f).exists():
                raise ConfigError(f"data file {f!r} does not exist")
    return tuple(sorted(items.items()))


def _loader_for(files: tuple[tuple[str, tuple[str, ...]], ...]) -> str:
    suffixes = {Path(f).suffix.lower() for _, group in files for f in group}
    loaders = {_LOADERS.get(s) for s in suffixes}
    if len(loaders) != 1 or None in loaders:
        raise ConfigError(
            f"data_files must all be one of {sorted(_LOADERS)} (json/jsonl, parquet, csv); got suffixes {sorted(suffixes)}"
        )
    loader = loaders.pop()
    assert loader is not None
    return loader


def load_rows(
    path: str | None = None,
    *,
    name: str | None = None,
    split: str = "test",
    data_files: DataFiles | None = None,
) -> Any:
    """A ``datasets.Dataset`` (rows are dicts, ``len`` and ``ds[i]`` work), cached per process.

    ``data_files`` (local files, any of json/jsonl/parquet/csv) wins over ``path`` (a hub name such as
    ``"openai/gsm8k"`` with ``name`` its config). With a single file or list, that is the ``split``.
    """
    if not split:
        raise ConfigError(f"split must be a non-empty str, got {split!r}")
    if data_files is None and not path:
        raise ConfigError("load_rows needs a hub dataset path or data_files")
    files = None if data_files is None else _normalise_files(data_files, split)
    # Local files ignore the hub path and config, so every caller that names the same files shares them.
    key: _CacheKey = ("", None, split, files) if files is not None else (str(path), name, split, None)
    with _lock:
        if key in _cache:
            return _cache[key]
        try:
            import datasets
        except ImportError as exc:
            raise missing_extra("ludic-envs", "hf", "datasets") from exc
        if files is not None:
            loaded = datasets.load_dataset(
                _loader_for(files), data_files={k: list(v) for k, v in files}, split=split
            )
        else:
            loaded = datasets.load_dataset(str(path), name, split=split)
        if len(loaded) == 0:
            raise DataError(f"dataset {files if files is not None else path!r} split {split!r} has no rows")
        log.info("dataset_loaded", path=path, name=name, split=split, data_files=files, rows=len(loaded))
        _cache[key] = loaded
        return loaded
