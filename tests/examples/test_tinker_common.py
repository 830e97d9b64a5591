"""``examples/tinker_common.py``: the Tinker examples' ``--tokenizer`` and ``--fake-service`` wiring.

The examples run end to end with ``--fake-service`` in ludic-tinker's tests
(``test_tic_tac_toe_example.py``, ``test_gsm8k_example.py``).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

pytest.importorskip("ludic_tinker")
pytest.importorskip("transformers")

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
sys.path.insert(0, str(EXAMPLES))

from tinker_common import add_service_arguments, open_service  # noqa: E402


def _args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_service_arguments(parser)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--resume", default=None)
    return parser.parse_args(list(argv))


class _TrainingClient:
    def get_tokenizer(self) -> Any:
        return "the base model's tokenizer"


async def test_tokenizer_option_loads_a_local_directory_instead_of_the_base_models(tmp_path: Path) -> None:
    # A tokenizer trained here in 0.1 s: the examples session has transformers but not the test extras
    # that build the real Qwen tokenizer offline.
    from ludic_train.testing import bpe_tokenizer

    bpe_tokenizer().save_pretrained(tmp_path / "tok")
    with open_service(_args("--tokenizer", str(tmp_path / "tok"))) as wiring:
        tokenizer = await wiring.tokenizer_for(_TrainingClient())
    assert tokenizer.decode(tokenizer.encode("hello tinker")) == "hello tinker"
    assert wiring.chat_template is None, "the agent's HFChatTemplate over that tokenizer"

    with open_service(_args()) as wiring:
        assert await wiring.tokenizer_for(_TrainingClient()) == "the base model's tokenizer"


def test_tokenizer_option_names_a_tokenizer_it_cannot_load(tmp_path: Path) -> None:
    missing = str(tmp_path / "no-such-tokenizer")
    with (
        pytest.raises(SystemExit, match=f"--tokenizer '{missing}' is neither a tokenizer directory"),
        open_service(_args("--tokenizer", missing)),
    ):
        pass


async def test_fake_service_wires_the_fake_and_leaves_the_environment_alone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("TINKER_BASE_URL", raising=False)
    with open_service(_args("--fake-service", "--base-model", "my/model")) as wiring:
        assert wiring.base_url is not None and wiring.base_url.startswith("http://127.0.0.1:")
        assert wiring.api_key is not None and wiring.api_key.startswith("tml-")
        assert await wiring.tokenizer_for(_TrainingClient()) is wiring.tokenizer
        assert wiring.chat_template is not None
        assert "TINKER_BASE_URL" not in os.environ
