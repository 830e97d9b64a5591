"""``ludic eval`` / ``ludic rollouts --backend tinker``: the command run as a subprocess, the real SDK in
it sampling from the loopback fake service this test process serves. The service's URL and key reach
the command as the SDK takes them (``TINKER_BASE_URL``, ``TINKER_API_KEY``), or as ``--base-url`` and
``backend.api_key_env``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from ludic_command import ludic

from ludic_core.credit import MonteCarloReturn
from ludic_core.errors import ConfigError
from ludic_core.rollout_log import read_rollouts
from ludic_core.run.configs import BackendConfig
from ludic_core.saw_builder import build_saw_items
from ludic_tinker.testing import FAKE_API_KEY, FAKE_BASE_MODEL, FakeTinkerService

pytest.importorskip("ludic_envs")
pytest.importorskip("ludic_agents")


def test_eval_samples_a_base_model_on_the_service(fake_service: FakeTinkerService, tmp_path: Path) -> None:
    args = (
        "eval",
        "tictactoe",
        "--backend",
        "tinker",
        "--model",
        FAKE_BASE_MODEL,
        "-n",
        "3",
        "--max-tokens",
        "8",
    )
    done = ludic(*args, "--run-dir", "run", cwd=tmp_path, service=fake_service)
    assert done.returncode == 0, done.stderr
    assert f"ludic eval tictactoe (tinker: {FAKE_BASE_MODEL})" in done.stdout
    assert "win_rate" in done.stdout and "failed_episodes" in done.stdout
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert metrics["num_episodes"] == 3 and metrics["num_failed_episodes"] == 0
    records = (tmp_path / "run" / "records.jsonl").read_text().splitlines()
    assert len(records) == 3 and all("outcome" in json.loads(line) for line in records)
    # Token-level: every episode can become trainable SAW items with the sampler's logprobs.
    rollouts = list(read_rollouts(tmp_path / "run" / "episodes.jsonl"))
    assert len(rollouts) == 3
    items = build_saw_items(rollouts, MonteCarloReturn().compute(rollouts), require_actor_logps=True)
    assert items and all(item.actor_logps is not None for item in items)
    fake_service.raise_for_violations()


async def test_rollouts_sample_saved_sampler_weights(
    fake_service: FakeTinkerService, training_client, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    saved = training_client.save_weights_for_sampler("policy").result(timeout=60).path
    assert saved.startswith("tinker://")
    # The URL as --base-url and the key from a variable of the user's choosing, not the SDK's.
    done = ludic(
        "rollouts", "tictactoe", "--backend", "tinker", "--model", saved, "--base-url", fake_service.base_url,
        "backend.api_key_env=MY_TINKER_KEY", "-n", "2", "--max-tokens", "8", "-o", "kept.jsonl",
        cwd=tmp_path, env={"MY_TINKER_KEY": FAKE_API_KEY, "TINKER_API_KEY": ""},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    rollouts = list(read_rollouts(tmp_path / "kept.jsonl"))
    assert len(rollouts) == 2
    items = build_saw_items(rollouts, MonteCarloReturn().compute(rollouts), require_actor_logps=True)
    assert items and all(item.actor_logps is not None for item in items)
    fake_service.raise_for_violations()


@pytest.mark.parametrize(
    ("config", "message"),
    [
        (BackendConfig(kind="tinker"), "backend 'tinker' needs backend.model (--model)"),
        (
            BackendConfig(kind="tinker", model=FAKE_BASE_MODEL, api_key_env="LUDIC_TEST_UNSET_KEY"),
            "backend.api_key_env = 'LUDIC_TEST_UNSET_KEY', but that environment variable is not set",
        ),
    ],
)
def test_bad_settings_are_named_before_any_remote_call(
    config: BackendConfig, message: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ludic_tinker.cli_backend import TinkerBackend

    monkeypatch.delenv("LUDIC_TEST_UNSET_KEY", raising=False)
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        TinkerBackend(config)
