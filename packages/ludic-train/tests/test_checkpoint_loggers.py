"""Checkpoint layout, atomicity, pruning, resume targets and RNG states; the loggers."""

from __future__ import annotations

import io
import json
import random
from pathlib import Path

import numpy as np
import pytest
import torch

from ludic_core.errors import ConfigError, DataError
from ludic_core.loggers.base import canonical_key
from ludic_core.loggers.console import PrintLogger, RichConsoleLogger, sparkline
from ludic_core.loggers.jsonl import JsonlLogger
from ludic_core.loggers.tee import TeeLogger
from ludic_train.checkpoint import CheckpointConfig, CheckpointManager
from ludic_train.testing import bpe_tokenizer, tiny_causal_lm


class CountingSource:
    def __init__(self) -> None:
        self.position = 0

    def state_dict(self) -> dict[str, int]:
        return {"position": self.position}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.position = state["position"]


def _setup():  # type: ignore[no-untyped-def]
    model = tiny_causal_lm(bpe_tokenizer(), seed=0)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    loss = model(torch.tensor([[5, 6, 7, 8]]), labels=torch.tensor([[5, 6, 7, 8]])).loss
    loss.backward()
    opt.step()
    return model, opt


def test_save_load_roundtrip_restores_everything(tmp_path: Path) -> None:
    model, opt = _setup()
    source = CountingSource()
    source.position = 17
    owned = {
        "py": random.Random(1),
        "torch": torch.Generator().manual_seed(2),
        "np": np.random.default_rng(3),
    }
    manager = CheckpointManager(CheckpointConfig(tmp_path, every_n_steps=5))
    assert manager.should_save(10) and not manager.should_save(7)
    path = manager.save(
        10, model=model, optimizer=opt, trainer_state={"algorithm": "x"}, batch_source=source, rngs=owned
    )
    assert path == tmp_path / "step_000010"
    latest = json.loads((tmp_path / "latest.json").read_text())
    assert {k: latest[k] for k in ("last_checkpoint", "step")} == {
        "last_checkpoint": "step_000010",
        "step": 10,
    }
    assert json.loads((path / "trainer_state.json").read_text())["algorithm"] == "x"
    expected_draws = (
        owned["py"].random(),
        torch.rand(1, generator=owned["torch"]).item(),
        owned["np"].random(),
        torch.rand(1).item(),
    )

    fresh = tiny_causal_lm(bpe_tokenizer(), seed=99)
    fresh_opt = torch.optim.AdamW(fresh.parameters(), lr=1e-2)
    fresh_source = CountingSource()
    fresh_owned = {
        "py": random.Random(0),
        "torch": torch.Generator().manual_seed(0),
        "np": np.random.default_rng(0),
    }
    loaded = manager.load(10, model=fresh, optimizer=fresh_opt, batch_source=fresh_source, rngs=fresh_owned)
    assert loaded.step == 10 and loaded.trainer_state["algorithm"] == "x"
    for (name, a), b in zip(model.state_dict().items(), fresh.state_dict().values(), strict=True):
        assert torch.equal(a, b), name
    assert fresh_opt.state_dict()["state"][0]["exp_avg"].equal(opt.state_dict()["state"][0]["exp_avg"])
    assert fresh_source.position == 17
    draws = (
        fresh_owned["py"].random(),
        torch.rand(1, generator=fresh_owned["torch"]).item(),
        fresh_owned["np"].random(),
        torch.rand(1).item(),
    )
    assert draws == expected_draws


def test_max_to_keep_resolution_and_stale_temp_dirs(tmp_path: Path) -> None:
    model, opt = _setup()
    manager = CheckpointManager(CheckpointConfig(tmp_path, max_to_keep=2))
    for step in (1, 2, 3):
        manager.save(step, model=model, optimizer=opt)
    assert [s for s, _ in manager.checkpoints()] == [2, 3]
    # A save killed half-way leaves a hidden temp dir (and maybe a step dir without state.pt): ignored.
    (tmp_path / ".tmp-step_000004-dead").mkdir()
    (tmp_path / "step_000005").mkdir()
    (tmp_path / "step_000005" / "model.pt").write_bytes(b"partial")
    assert manager.latest() == tmp_path / "step_000003"
    assert manager.resolve(None) == tmp_path / "step_000003"
    assert manager.resolve("2") == tmp_path / "step_000002"
    assert manager.resolve(str(tmp_path / "step_000002")) == tmp_path / "step_000002"
    with pytest.raises(DataError, match="no checkpoint for step 1"):
        manager.resolve(1)
    with pytest.raises(DataError, match="not a complete checkpoint"):
        manager.resolve(tmp_path / "step_000005")
    CheckpointManager(CheckpointConfig(tmp_path))  # a new manager clears stale temp dirs
    assert not list(tmp_path.glob(".tmp-*"))
    manager.save(3, model=model, optimizer=opt)  # re-saving an existing step swaps it in place
    assert [s for s, _ in manager.checkpoints()] == [2, 3]


def test_trainable_only_weights(tmp_path: Path) -> None:
    from peft import LoraConfig, get_peft_model

    model = get_peft_model(
        tiny_causal_lm(bpe_tokenizer(), seed=0), LoraConfig(r=4, target_modules=["q_proj"])
    )
    with torch.no_grad():
        for n, p in model.named_parameters():
            if "lora_B" in n:
                p.fill_(0.5)
    manager = CheckpointManager(CheckpointConfig(tmp_path, weights="trainable", save_optimizer=False))
    path = manager.save(1, model=model)
    assert path is not None
    saved = torch.load(path / "model.pt", weights_only=True)
    assert saved and all("lora_" in k for k in saved)
    fresh = get_peft_model(
        tiny_causal_lm(bpe_tokenizer(), seed=0), LoraConfig(r=4, target_modules=["q_proj"])
    )
    manager.load(1, model=fresh)
    for (n, a), b in zip(model.state_dict().items(), fresh.state_dict().values(), strict=True):
        assert torch.equal(a, b), n
    with pytest.raises(DataError, match="no optimizer state"):
        manager.load(1, model=fresh, optimizer=torch.optim.SGD(fresh.parameters(), lr=1.0))


def test_checkpoint_config_validation(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="max_to_keep"):
        CheckpointConfig(tmp_path, max_to_keep=0)
    with pytest.raises(ConfigError, match="every_n_steps"):
        CheckpointConfig(tmp_path, every_n_steps=-1)


def test_jsonl_and_tee_loggers(tmp_path: Path) -> None:
    class Broken:
        def log(self, step: int, stats: dict[str, float]) -> None:
            raise RuntimeError("network down")

        def close(self) -> None:
            return None

    jsonl = JsonlLogger(tmp_path / "metrics.jsonl")
    stream = io.StringIO()
    tee = TeeLogger(Broken(), jsonl, PrintLogger(stream=stream))
    tee.log(1, {"train/loss": 0.5, "perf/step_s": torch.tensor(0.25)})
    tee.log(2, {"train/loss": 0.25})
    tee.close()
    records = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [(r["step"], r["train/loss"]) for r in records] == [(1, 0.5), (2, 0.25)]
    assert records[0]["perf/step_s"] == 0.25
    assert "step 2 | train/loss=0.2500" in stream.getvalue()
    with pytest.raises(RuntimeError):
        TeeLogger(Broken(), raise_errors=True).log(1, {})


def test_canonical_keys() -> None:
    assert canonical_key("loss") == "train/loss"
    assert canonical_key("eval_win_rate") == "eval/win_rate"
    assert canonical_key("perf/step_s") == "perf/step_s"


def test_rich_console_logger_renders_panels_and_sparkline() -> None:
    from rich.console import Console

    out = io.StringIO()
    logger = RichConsoleLogger(total_steps=3, console=Console(file=out, width=120, force_terminal=False))
    for step, reward in enumerate([0.1, 0.5, 0.9], start=1):
        logger.log(step, {"train/avg_total_reward": reward, "train/loss": 1.0 / step, "perf/step_s": 0.1})
    logger.log(3, {"eval/win_rate": 0.75})
    logger.close()
    text = out.getvalue()
    for fragment in ("train", "eval", "perf", "win_rate", "0.7500", "3/3", sparkline([0.1, 0.5, 0.9])):
        assert fragment in text, fragment
    assert text.endswith("╯\n")  # off a terminal too, the final panel ends its line
    assert sparkline([0.0, 1.0]) == "▁█"


def test_wandb_logger_offline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("wandb")
    from ludic_core.loggers.wandb import WandbLogger

    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.delenv("WANDB_PROJECT", raising=False)
    logger = WandbLogger(dir=tmp_path, name="test-run", config={"lr": 1e-3})
    assert logger.run.project == "Ludic"
    logger.log(1, {"train/loss": 0.5})
    logger.close()
    assert list(tmp_path.glob("wandb/offline-run-*"))
