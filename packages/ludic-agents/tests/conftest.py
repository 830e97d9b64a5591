from __future__ import annotations

import os

# Before anything imports transformers: nothing in these tests may reach a hub.
for _var in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE"):
    os.environ.setdefault(_var, "1")

from typing import Any  # noqa: E402

import pytest  # noqa: E402

from ludic_core.errors import MissingExtraError  # noqa: E402


def _load(builder_name: str) -> Any:
    from ludic_agents import testing

    try:
        return getattr(testing, builder_name)()
    except MissingExtraError as exc:  # a checkout without the offline assets installed
        pytest.skip(f"{builder_name} unavailable: {exc}")


@pytest.fixture(scope="session")
def qwen_tok() -> Any:
    return _load("qwen25_tokenizer")


@pytest.fixture(scope="session")
def smol_tok() -> Any:
    return _load("smollm2_tokenizer")


@pytest.fixture(scope="session", params=["qwen2.5", "smollm2"])
def real_tok(request: pytest.FixtureRequest) -> Any:
    return _load("qwen25_tokenizer" if request.param == "qwen2.5" else "smollm2_tokenizer")


@pytest.fixture
def qwen_template(qwen_tok: Any) -> Any:
    from ludic_agents import HFChatTemplate

    return HFChatTemplate(qwen_tok, tool_parser="hermes")
