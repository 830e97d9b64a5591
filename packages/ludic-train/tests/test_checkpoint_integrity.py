"""Checkpoints you can trust: checksummed manifests, fallback to the newest good checkpoint, no half
checkpoint after a crash, re-saves that never lose the last good copy, and ``latest`` that follows the
run's own line."""

from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from ludic_core.errors import DataError
from ludic_train import checkpoint as checkpoint_module
from ludic_train import checkpoint_files
from ludic_train.checkpoint import (
    CheckpointConfig,
    CheckpointManager,
    CheckpointSaveError,
    verify_checkpoint,
)
from ludic_train.testing import bpe_tokenizer, tiny_causal_lm


def _model(seed: int) -> torch.nn.Module:
    return tiny_causal_lm(bpe_tokenizer(), seed=seed)


def _save(manager: CheckpointManager, step: int, seed: int) -> Path:
    model = _model(seed)
    path = manager.save(step, model=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.1))
    assert path is not None
    return path


def _weights_of(seed: int) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in _model(seed).state_dict().items()}


def _two_checkpoints(tmp_path: Path) -> Path:
    """Steps 1 and 2 of one run; returns step 2's directory."""
    manager = CheckpointManager(CheckpointConfig(tmp_path, max_to_keep=3))
    _save(manager, 1, seed=1)
    return _save(manager, 2, seed=2)


def _flip_a_bit(path: Path) -> None:
    """One flipped bit in the middle of the file (the tensor payload: torch.load accepts it)."""
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))


def _loads_as(manager: CheckpointManager, seed: int, target: Any = None) -> Path:
    model = _model(99)
    loaded = manager.load(target, model=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.1))
    for name, value in _weights_of(seed).items():
        torch.testing.assert_close(model.state_dict()[name], value, rtol=0, atol=0, msg=name)
    return loaded.path


def test_manifest_lists_every_file_with_its_sha256(tmp_path: Path) -> None:
    path = _save(CheckpointManager(CheckpointConfig(tmp_path)), 1, seed=1)
    manifest = json.loads((path / "manifest.json").read_text())
    assert set(manifest["files"]) == {"model.pt", "optimizer.pt", "state.pt", "trainer_state.json"}
    assert all(len(entry["sha256"]) == 64 for entry in manifest["files"].values())
    verify_checkpoint(path)


@pytest.mark.parametrize("damage", ["truncate", "bitflip"])
def test_a_corrupt_weights_file_is_detected_and_latest_falls_back(
    tmp_path: Path, damage: str, caplog: pytest.LogCaptureFixture
) -> None:
    newest = _two_checkpoints(tmp_path)
    weights = newest / "model.pt"
    if damage == "truncate":
        weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    else:
        _flip_a_bit(weights)

    with pytest.raises(DataError, match=r"step_000002/model\.pt: .*manifest\.json"):
        verify_checkpoint(newest)
    with pytest.raises(DataError, match=r"model\.pt"):
        _loads_as(CheckpointManager(CheckpointConfig(tmp_path)), seed=2, target=2)  # explicit: no fallback
    with caplog.at_level(logging.WARNING, logger="ludic"):
        loaded = _loads_as(CheckpointManager(CheckpointConfig(tmp_path)), seed=1)
    assert loaded.name == "step_000001"
    assert "checkpoint.skipped" in caplog.text and "step_000002" in caplog.text


def test_a_manifest_mismatch_names_the_file(tmp_path: Path) -> None:
    path = _save(CheckpointManager(CheckpointConfig(tmp_path)), 1, seed=1)
    manifest = json.loads((path / "manifest.json").read_text())
    manifest["files"]["optimizer.pt"]["sha256"] = "0" * 64
    (path / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(DataError, match=r"step_000001/optimizer\.pt: sha256 [0-9a-f]{64} does not match"):
        verify_checkpoint(path)
    (path / "optimizer.pt").unlink()
    with pytest.raises(DataError, match=r"optimizer\.pt: listed in manifest\.json but missing"):
        verify_checkpoint(path)


def test_torch_load_errors_name_the_file_and_never_advise_weights_only_false(tmp_path: Path) -> None:
    path = _save(CheckpointManager(CheckpointConfig(tmp_path)), 1, seed=1)
    (path / "state.pt").write_bytes(b"not a torch file")
    # A manifest that vouches for the damage (a writer bug), so that torch.load meets it.
    manifest = json.loads((path / "manifest.json").read_text())
    manifest["files"]["state.pt"] = {"sha256": hashlib.sha256(b"not a torch file").hexdigest(), "bytes": 16}
    (path / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(DataError) as info:
        _loads_as(CheckpointManager(CheckpointConfig(tmp_path)), seed=1, target=1)
    message = str(info.value)
    assert "step_000001/state.pt" in message and "weights_only=True" in message
    assert "do not load it with weights_only=False" in message


def test_a_crash_mid_write_leaves_the_previous_checkpoint_as_latest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    manager = CheckpointManager(CheckpointConfig(tmp_path))
    _save(manager, 1, seed=1)
    real_save = checkpoint_module.save_torch_file
    written: list[str] = []

    def crash_after_the_weights(obj: Any, path: Path) -> None:
        if written:
            raise OSError("disk full (simulated)")
        real_save(obj, path)
        written.append(path.name)

    monkeypatch.setattr(checkpoint_module, "save_torch_file", crash_after_the_weights)
    with pytest.raises(OSError, match="simulated"):
        _save(manager, 2, seed=2)
    assert written == ["model.pt"]
    monkeypatch.undo()
    assert [s for s, _ in manager.checkpoints()] == [1]
    assert not list(tmp_path.glob(".tmp-*"))
    assert json.loads((tmp_path / "latest.json").read_text())["step"] == 1
    assert _loads_as(CheckpointManager(CheckpointConfig(tmp_path)), seed=1).name == "step_000001"


def test_a_kill_during_a_resave_keeps_the_old_copy(tmp_path: Path) -> None:
    manager = CheckpointManager(CheckpointConfig(tmp_path))
    _save(manager, 1, seed=1)
    old = _save(manager, 2, seed=2)
    # A kill between moving the old copy aside and moving the new one in leaves exactly this (and a
    # half-written temp dir, which a hard kill never cleans up).
    old.rename(tmp_path / ".prev-step_000002-4242-deadbeef")
    (tmp_path / ".tmp-step_000002-xyz").mkdir()
    (tmp_path / ".tmp-step_000002-xyz" / "model.pt").write_bytes(b"half")
    restarted = CheckpointManager(CheckpointConfig(tmp_path))
    assert [s for s, _ in restarted.checkpoints()] == [1, 2]
    assert not list(tmp_path.glob(".prev-*")) and not list(tmp_path.glob(".tmp-*"))
    assert _loads_as(restarted, seed=2).name == "step_000002"
    # A completed re-save swaps in the new copy and removes the old one.
    _save(restarted, 2, seed=3)
    assert _loads_as(restarted, seed=3, target=2).name == "step_000002"
    assert not list(tmp_path.glob(".prev-*"))


def test_latest_follows_the_run_line_and_never_moves_back(tmp_path: Path) -> None:
    first = CheckpointManager(CheckpointConfig(tmp_path, max_to_keep=5))
    for step in (1, 2, 3):
        _save(first, step, seed=step)
    # A second run resumes step 1 explicitly and goes on: steps 2-3 of the first run are abandoned.
    second = CheckpointManager(CheckpointConfig(tmp_path, max_to_keep=5))
    _loads_as(second, seed=1, target=1)
    _save(second, 2, seed=20)
    assert json.loads((tmp_path / "latest.json").read_text())["step"] == 2
    # The abandoned step 3 is newer by number but not on the line that saved last.
    assert CheckpointManager(CheckpointConfig(tmp_path)).latest() == tmp_path / "step_000002"
    assert _loads_as(CheckpointManager(CheckpointConfig(tmp_path)), seed=20).name == "step_000002"
    # Saving an older step on the same line does not move latest back.
    _save(second, 1, seed=10)
    assert json.loads((tmp_path / "latest.json").read_text())["step"] == 2


def test_retention_prefers_the_run_line(tmp_path: Path) -> None:
    first = CheckpointManager(CheckpointConfig(tmp_path, max_to_keep=2))
    for step in (1, 2, 3):
        _save(first, step, seed=step)
    assert [s for s, _ in first.checkpoints()] == [2, 3]
    second = CheckpointManager(CheckpointConfig(tmp_path, max_to_keep=2))
    _loads_as(second, seed=2, target=2)
    _save(second, 3, seed=30)  # re-save of step 3 on the new line replaces the abandoned one
    _save(second, 4, seed=4)
    assert [s for s, _ in second.checkpoints()] == [3, 4]
    assert _loads_as(CheckpointManager(CheckpointConfig(tmp_path)), seed=30, target=3).name == "step_000003"


@pytest.mark.parametrize("damage", ["deleted", "garbage", "no-files"])
def test_a_checkpoint_without_a_readable_manifest_never_loads(
    tmp_path: Path, damage: str, caplog: pytest.LogCaptureFixture
) -> None:
    newest = _two_checkpoints(tmp_path)
    _flip_a_bit(newest / "model.pt")  # weights torch.load accepts: only the manifest tells
    manifest = newest / "manifest.json"
    if damage == "deleted":
        manifest.unlink()
    else:
        manifest.write_text("{not json" if damage == "garbage" else json.dumps({"step": 2}))
    with pytest.raises(DataError, match=r"step_000002/manifest\.json: (missing|unreadable|not a checkpoint)"):
        _loads_as(CheckpointManager(CheckpointConfig(tmp_path)), seed=2, target=2)
    with caplog.at_level(logging.WARNING, logger="ludic"):
        assert _loads_as(CheckpointManager(CheckpointConfig(tmp_path)), seed=1).name == "step_000001"
    # The warning names the checkpoint left out and why.
    assert "step_000002/manifest.json" in caplog.text


def test_a_full_disk_names_the_cause_the_file_and_the_checkpoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    manager = CheckpointManager(CheckpointConfig(tmp_path))
    _save(manager, 1, seed=1)
    real_save = checkpoint_module.save_torch_file

    def onto_a_full_device(obj: Any, path: Path) -> None:
        if path.name == "optimizer.pt":
            real_save(obj, Path("/dev/full"))  # a real write that fails the way a full disk does
        real_save(obj, path)

    monkeypatch.setattr(checkpoint_module, "save_torch_file", onto_a_full_device)
    monkeypatch.setattr(checkpoint_files.shutil, "disk_usage", lambda _p: shutil_usage(free=4096))
    with pytest.raises(CheckpointSaveError) as raised:
        _save(manager, 2, seed=2)
    message = str(raised.value)
    assert "checkpoint step_000002: writing optimizer.pt failed (no space left on the device" in message
    assert "4096 bytes free" in message and "previous checkpoints are intact" in message
    monkeypatch.undo()
    assert [s for s, _ in manager.checkpoints()] == [1] and not list(tmp_path.glob(".tmp-*"))


def shutil_usage(free: int) -> Any:
    """What ``shutil.disk_usage`` answers, with ``free`` bytes free (the save reads only ``free``)."""
    return SimpleNamespace(total=1 << 30, used=(1 << 30) - free, free=free)


def test_a_crash_after_resuming_an_older_checkpoint_resumes_it_again(tmp_path: Path) -> None:
    first = CheckpointManager(CheckpointConfig(tmp_path, max_to_keep=5))
    for step in (1, 2, 3):
        _save(first, step, seed=step)
    # A second run resumes step 1 explicitly, then dies before its first save.
    _loads_as(CheckpointManager(CheckpointConfig(tmp_path, max_to_keep=5)), seed=1, target=1)
    # The next resume continues from step 1, not from the abandoned steps 2-3.
    assert CheckpointManager(CheckpointConfig(tmp_path)).latest() == tmp_path / "step_000001"
    third = CheckpointManager(CheckpointConfig(tmp_path, max_to_keep=5))
    assert _loads_as(third, seed=1).name == "step_000001"
    _save(third, 2, seed=20)
    assert _loads_as(CheckpointManager(CheckpointConfig(tmp_path)), seed=20).name == "step_000002"
