"""Every field of a training run's config is refused, naming it, when its value has the wrong type, is
not finite or is out of range: before any model loads (``load_config`` builds no model)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ludic_core.errors import ConfigError
from ludic_core.run.loading import load_config
from ludic_train.recipes.config import LocalLoraSettings, RLRunConfig

HOSTILE = [
    "episodes=0", "episodes=inf", "episodes=1.5", "episodes=true",
    "samples_per_prompt=0", "seed=-1", "steps=0", "steps=inf", "steps=1e30", "eval_episodes=0",
    "backend.kind=5", "backend.max_concurrency=0", "backend.request_timeout_s=nan",
    "backend.request_timeout_s=0", "backend.max_retries=-1", "backend.base_urls=[]",
    "backend.base_urls=['ftp://x']",
    "sampling.temperature=nan", "sampling.temperature=-1", "sampling.temperature=inf",
    "sampling.max_tokens=0", "sampling.top_p=0", "sampling.top_p=1.5", "sampling.top_p=nan",
    "rollout.max_steps=0", "rollout.concurrency=0", "rollout.timeout_s=nan", "rollout.timeout_s=-1",
    "rollout.episode_timeout_s=0", "rollout.on_failure=ignore",
    "trainer.pad_token_id=-5", "trainer.device=banana", "trainer.optimizer=adam", "trainer.lr=true",
    "trainer.lr=nan", "trainer.lr=0", "trainer.weight_decay=inf", "trainer.weight_decay=-1",
    "trainer.betas=[0.9, 1.0]", "trainer.eps=0", "trainer.max_grad_norm=inf", "trainer.max_seq_len=1.5",
    "trainer.micro_token_budget=0", "trainer.publish_every_steps=-1", "trainer.max_lag=-1",
    "trainer.max_refills=0", "trainer.log_every=0", "trainer.eval_every_steps=-1",
    "trainer.max_consecutive_skipped_steps=0", "trainer.share_prompt_prefix=2",
    "lora.rank=-1", "lora.alpha=-1", "lora.alpha=nan", "lora.dropout=5.0", "lora.dropout=nan",
    "lora.include_lm_head=3", "lora.top_layers=0", "lora.top_layers=1.5",
    "run.checkpoint_every=-1", "run.max_to_keep=0", "run.loggers=['tensorboard']", "run.save_final=2",
]  # fmt: skip


def test_a_batch_too_large_to_hold_is_refused() -> None:
    overrides = ["env=tictactoe", "samples_per_prompt=8", "episodes=1000000"]
    with pytest.raises(ConfigError, match="episodes x samples_per_prompt = 1000000 x 8"):
        load_config(RLRunConfig, overrides=overrides)


def test_a_missing_chat_template_file_is_refused_before_the_model_loads(tmp_path: Path) -> None:
    from ludic_train.recipes.components import build_model

    missing = str(tmp_path / "nope.jinja")
    with pytest.raises(ConfigError, match=r"chat_template: '.*nope\.jinja' is not a readable file"):
        build_model("/nonexistent-model", device="cpu", lora=LocalLoraSettings(), chat_template=missing)


@pytest.mark.parametrize("override", HOSTILE)
def test_a_hostile_value_is_refused_naming_its_field(override: str) -> None:
    field = override.split("=", 1)[0].split(".")[-1]
    with pytest.raises(ConfigError, match=field):
        load_config(RLRunConfig, overrides=["env=tictactoe", override])


def test_the_defaults_pass() -> None:
    config = load_config(RLRunConfig, overrides=["env=tictactoe"])
    assert config.steps >= 1 and config.sampling.temperature == 1.0


def test_lora_top_layers_adapts_only_the_top_decoder_layers() -> None:
    from ludic_train.recipes.components import build_model

    model, _ = build_model("tiny", device="cpu", lora=LocalLoraSettings(rank=2, top_layers=1))
    layers = model.config.num_hidden_layers
    adapted = {
        name.split(".layers.")[1].split(".")[0] for name, _ in model.named_parameters() if "lora_" in name
    }
    assert adapted == {str(layers - 1)}
    with pytest.raises(
        ConfigError, match=f"lora.top_layers={layers + 1} exceeds the model's {layers} decoder"
    ):
        build_model("tiny", device="cpu", lora=LocalLoraSettings(rank=2, top_layers=layers + 1))


def test_top_layers_names_the_setting_it_came_from() -> None:
    from ludic_train.lora import top_layers
    from ludic_train.testing import bpe_tokenizer, tiny_causal_lm

    model = tiny_causal_lm(bpe_tokenizer(), num_hidden_layers=3)
    assert top_layers(model, 2) == range(1, 3)
    assert top_layers(model, 3) == range(3)
    with pytest.raises(ConfigError, match=r"--lora-layers=4 exceeds the model's 3 decoder layers"):
        top_layers(model, 4, field="--lora-layers")
    with pytest.raises(ConfigError, match=r"--lora-layers must be an int >= 1, got 0"):
        top_layers(model, 0, field="--lora-layers")
