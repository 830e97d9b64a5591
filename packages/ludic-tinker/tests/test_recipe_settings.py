"""The Tinker RL recipe reads the settings every backend names alike (``[trainer]``, ``[lora]``,
``[run]``; :mod:`ludic_core.run.training`): what they say reaches the service, Tinker's defaults are
``AdamConfig``'s, and the old ``[tinker]`` spellings are refused naming the new key."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from ludic_command import EXAMPLES, SMALL, ludic

from ludic_core.errors import ConfigError
from ludic_core.run.loading import load_config
from ludic_tinker import AdamConfig
from ludic_tinker.recipes import TinkerRLRunConfig, adam_config
from ludic_tinker.testing import FAKE_BASE_MODEL, FakeTinkerService


def _load(*overrides: str, files: tuple[Path, ...] = ()) -> TinkerRLRunConfig:
    return load_config(TinkerRLRunConfig, files=files, overrides=["env=tictactoe", *overrides])


def test_the_shared_settings_reach_the_service(fake_service: FakeTinkerService, tmp_path: Path) -> None:
    pytest.importorskip("ludic_envs")
    pytest.importorskip("ludic_agents")
    pytest.importorskip("ludic_train")  # `ludic train`
    done = ludic(
        "train", "tictactoe-grpo", str(EXAMPLES / "tic_tac_toe" / "grpo_tinker.toml"), *SMALL,
        f"tinker.base_model={FAKE_BASE_MODEL}", "trainer.lr=1e-3", "trainer.betas=[0.8, 0.9]",
        "trainer.weight_decay=0.1", "trainer.max_grad_norm=2.0", "lora.rank=4", "run.checkpoint_every=1",
        "run_dir=run", service=fake_service, cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    fake_service.raise_for_violations()
    assert [run.lora_rank for run in fake_service.training_runs] == [4]
    for params in fake_service.optim_step_params:
        assert params == pytest.approx(
            {
                "learning_rate": 1e-3,
                "beta1": 0.8,
                "beta2": 0.9,
                "eps": 1e-8,
                "weight_decay": 0.1,
                "grad_clip_norm": 2.0,
            }
        )
    assert len(fake_service.optim_step_params) == 2
    records = sorted(p.name for p in (tmp_path / "run" / "checkpoints").iterdir())
    assert records == ["step_00000001.json", "step_00000002.json"]
    config = json.loads((tmp_path / "run" / "config.json").read_text())
    assert config["lora"] == {"rank": 4} and config["run"] == {"checkpoint_every": 1}


def test_tinkers_defaults_are_its_adam_configs() -> None:
    config = _load()
    assert adam_config(config.trainer) == AdamConfig()
    assert config.lora.rank == 32
    assert config.run.checkpoint_every == 0 and config.trainer.eval_every_steps == 0  # 0: never


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("tinker.adam.learning_rate=1e-4", "trainer.lr"),
        ("tinker.adam.beta1=0.8", "trainer.betas"),
        ("tinker.adam.beta2=0.9", "trainer.betas"),
        ("tinker.adam.eps=1e-6", "trainer.eps"),
        ("tinker.adam.weight_decay=0.1", "trainer.weight_decay"),
        ("tinker.adam.grad_clip_norm=1.0", "trainer.max_grad_norm"),
        ("tinker.lora_rank=4", "lora.rank"),
        ("tinker.checkpoint_every=2", "run.checkpoint_every"),
        ("tinker.eval_every=2", "trainer.eval_every_steps"),
    ],
)
def test_an_old_name_is_refused_naming_the_new_one(old: str, new: str) -> None:
    key = old.split("=", 1)[0]
    with pytest.raises(ConfigError, match=f"override '{old}': '{key}' was renamed: set '{new}' instead"):
        _load(old)


def test_an_old_table_in_a_file_is_refused_key_by_key(tmp_path: Path) -> None:
    path = tmp_path / "old.toml"
    path.write_text("[tinker]\nlora_rank = 4\n\n[tinker.adam]\nlearning_rate = 1e-4\nbeta2 = 0.9\n")
    with pytest.raises(ConfigError) as raised:
        _load(files=(path,))
    message = str(raised.value)
    for old, new in (
        ("tinker.lora_rank", "lora.rank"),
        ("tinker.adam.learning_rate", "trainer.lr"),
        ("tinker.adam.beta2", "trainer.betas"),
    ):
        assert f"config file '{path}': '{old}' was renamed: set '{new}' instead" in message


def test_what_only_the_local_trainer_honours_is_an_unknown_key() -> None:
    with pytest.raises(ConfigError, match=r"unknown key 'lora\.alpha' \(valid keys here: rank\)"):
        _load("lora.alpha=16")
    with pytest.raises(ConfigError, match=r"unknown key 'trainer\.max_seq_len'"):
        _load("trainer.max_seq_len=512")


def test_lora_rank_0_is_refused_since_tinker_trains_adapters_only() -> None:
    from ludic_tinker.recipe_run import check_tinker_rl

    with pytest.raises(ConfigError, match=r"lora\.rank = 0: Tinker trains LoRA adapters only"):
        check_tinker_rl(_load("lora.rank=0"))
