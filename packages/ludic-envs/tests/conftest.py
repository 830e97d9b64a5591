"""Shared fixtures: offline HF settings and the shared data folder."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

# Nothing in these tests may reach a hub (a hub call hangs for ~50 s before failing).
for _name in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE"):
    os.environ.setdefault(_name, "1")

REPO_ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """``$LUDIC_SHARED_DATA``, else ``<repo>/../shared/data`` (where CI puts it)."""
    path = Path(os.environ.get("LUDIC_SHARED_DATA", REPO_ROOT.parent / "shared" / "data"))
    if not path.is_dir():
        pytest.fail(f"shared data folder {path} is missing; set LUDIC_SHARED_DATA")
    return path
