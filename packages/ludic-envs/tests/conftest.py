"""Shared fixtures: offline HF settings and the shared data folder."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

# Nothing in these tests may reach a hub (a hub call hangs for ~50 s before failing).
for _name in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE"):
    os.environ.setdefault(_name, "1")

REPO_ROOT = Path(__file__).resolve().parents[3]


DATA_HELP = (
    "set LUDIC_DATA_DIR to a folder holding gsm8k/test.jsonl and math500/test.jsonl (the test splits of "
    "the openai/gsm8k and HuggingFaceH4/MATH-500 hub datasets, saved with datasets' to_json)"
)


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """The folder named by ``$LUDIC_DATA_DIR`` (CI sets it); tests that need real rows skip without it."""
    value = os.environ.get("LUDIC_DATA_DIR")
    if not value:
        pytest.skip(f"no GSM8K/MATH-500 data: {DATA_HELP}")
    path = Path(value)
    if not path.is_dir():
        pytest.fail(f"LUDIC_DATA_DIR={value!r} is not a directory; {DATA_HELP}")
    return path
