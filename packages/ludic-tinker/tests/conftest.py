"""Fixtures: the unmodified tinker SDK pointed at a loopback fake Tinker service (``ludic_tinker.testing``).

Every test that uses the fake fails if ludic sent the service anything invalid (the fake records a
violation for each such request; see ``ludic_tinker/testing/server.py``).
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

# Before the SDK is imported: no telemetry posts, and nothing may reach a hub or the real service.
os.environ["TINKER_TELEMETRY"] = "0"
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.pop("TINKER_BASE_URL", None)

from ludic_tinker.testing import (
    FAKE_API_KEY,
    FAKE_BASE_MODEL,
    FakeTinkerService,
    FakeTokenizer,
    fake_tinker_service,
)


@pytest.fixture
def fake_service() -> Iterator[FakeTinkerService]:
    # set_env=False: the tests pass base_url and api_key explicitly, and some check connect()'s
    # behaviour without TINKER_BASE_URL / TINKER_API_KEY.
    with fake_tinker_service(seed=0, set_env=False) as service:
        yield service


@pytest.fixture
def tokenizer() -> FakeTokenizer:
    return FakeTokenizer()


@pytest.fixture
def service_client(fake_service: FakeTinkerService):  # type: ignore[no-untyped-def]
    from ludic_tinker import connect

    return connect(base_url=fake_service.base_url, api_key=FAKE_API_KEY)


@pytest.fixture
async def training_client(service_client):  # type: ignore[no-untyped-def]
    from ludic_tinker import create_training_client

    return await create_training_client(service_client, FAKE_BASE_MODEL, rank=4, seed=0)
