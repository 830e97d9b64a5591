"""``ludic_tinker.testing``'s public entry point: ``fake_tinker_service`` and the fake without torch."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from ludic_tinker import connect, create_training_client
from ludic_tinker.testing import FAKE_API_KEY, FAKE_BASE_MODEL, FakeTinkerService, fake_tinker_service


async def test_the_context_manager_points_connect_at_the_fake_and_restores_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("TINKER_API_KEY", "tml-someone-elses-key")
    monkeypatch.delenv("TINKER_BASE_URL", raising=False)
    with fake_tinker_service(base_models=(FAKE_BASE_MODEL, "my/base-model")) as service:
        assert os.environ["TINKER_BASE_URL"] == service.base_url
        assert service.base_url.startswith("http://127.0.0.1:")
        assert os.environ["TINKER_API_KEY"] == service.api_key == FAKE_API_KEY
        training = await create_training_client(connect(), "my/base-model", rank=4, seed=0)
        assert training.model_id in {run.model_id for run in service.training_runs}
    assert "TINKER_BASE_URL" not in os.environ
    assert os.environ["TINKER_API_KEY"] == "tml-someone-elses-key"
    with pytest.raises(RuntimeError, match="not started"):
        _ = service.base_url


def test_a_clean_exit_raises_for_invalid_requests_the_fake_received() -> None:
    with pytest.raises(AssertionError, match="1 invalid request"), fake_tinker_service() as service:
        service.violations.append("a request the real service would reject")
    with fake_tinker_service(check=False) as service:
        service.violations.append("reported by the caller instead")


def test_base_models_must_be_a_tuple_of_names() -> None:
    with pytest.raises(ValueError, match="base_models must be a non-empty tuple of names, got 'fake/x'"):
        FakeTinkerService(base_models="fake/x")  # type: ignore[arg-type]


def test_the_module_imports_without_torch_and_names_the_extra_when_started() -> None:
    # A sys.modules entry of None makes `import torch` fail as if torch were not installed.
    code = (
        "import sys; sys.modules['torch'] = None\n"
        "import ludic_tinker.testing as t\n"
        "from ludic_core.errors import MissingExtraError\n"
        "try:\n"
        "    t.fake_tinker_service().__enter__()\n"
        "except MissingExtraError as exc:\n"
        "    print(exc)\n"
    )
    env = {**os.environ, "TINKER_TELEMETRY": "0"}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env, check=True
    )
    assert 'pip install "ludic-tinker[torch]"' in out.stdout, out.stdout + out.stderr
