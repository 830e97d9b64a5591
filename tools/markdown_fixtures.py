"""pytest fixtures for the documentation tests (``nox -s docs``), loaded with ``-p markdown_fixtures``.

A code block asks for one with pytest-markdown-docs' ``fixture:<name>`` fence option, e.g.
```` ```python fixture:in_tmp_dir ````.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest


@pytest.fixture
def in_tmp_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Run the block in an empty temporary folder (checkpoints, metrics files)."""
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.fixture
def gsm8k_files(in_tmp_dir: Path) -> Path:
    """A temporary folder holding ``data/gsm8k/test.jsonl``: 20 GSM8K-shaped rows (question, answer
    ending in ``#### <number>``), so blocks that load GSM8K from local files run offline."""
    path = in_tmp_dir / "data" / "gsm8k" / "test.jsonl"
    path.parent.mkdir(parents=True)
    rows = [
        {
            "question": f"Tom has {n} apples and buys {n + 1} more. How many apples does he have?",
            "answer": f"{n} + {n + 1} = {2 * n + 1}\n#### {2 * n + 1}",
        }
        for n in range(20)
    ]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return in_tmp_dir
