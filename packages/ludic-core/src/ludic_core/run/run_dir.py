"""The run directory of a command: the resolved config and the installed package versions go in first,
before any episode runs, so a run that crashes still says what it was."""

from __future__ import annotations

import json
import platform
import sys
import time
from importlib import metadata
from pathlib import Path
from typing import Any

from ludic_core.run.loading import to_json

__all__ = ["choose_run_dir", "create_run_dir", "installed_versions"]

_THIRD_PARTY = (
    "attrs",
    "cattrs",
    "aiohttp",
    "structlog",
    "torch",
    "transformers",
    "vllm",
    "tinker",
    "datasets",
)


def installed_versions() -> dict[str, str]:
    """Every installed Ludic distribution and the third-party libraries that shape results."""
    versions: dict[str, str] = {}
    for dist in metadata.distributions():
        name = dist.metadata["Name"]
        if name and (name.startswith("ludic") or name in _THIRD_PARTY):
            versions[name] = dist.version
    return dict(sorted(versions.items()))


def choose_run_dir(command: str, env: str, run_dir: str) -> Path:
    """``run_dir``, or ``runs/<command>-<env>-<time>`` when it is empty."""
    return Path(run_dir) if run_dir else Path("runs") / f"{command}-{env}-{time.strftime('%Y%m%d-%H%M%S')}"


def create_run_dir(command: str, env: str, config: Any, run_dir: str) -> Path:
    """:func:`choose_run_dir`; writes ``config.json`` (rerun it with ``--config``) and
    ``versions.json``."""
    path = choose_run_dir(command, env, run_dir)
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(json.dumps(to_json(config), indent=2) + "\n")
    versions = {
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "packages": installed_versions(),
        "argv": sys.argv,
    }
    (path / "versions.json").write_text(json.dumps(versions, indent=2) + "\n")
    return path
