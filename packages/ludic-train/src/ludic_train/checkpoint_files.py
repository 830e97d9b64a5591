"""The files of a checkpoint: written durably (fsynced, a failed write named by checkpoint, file and
cause), listed in its manifest (sha256 and size per file) and verified against it, and read back with
``torch.load(weights_only=True)``."""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import pickle
import shutil
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ludic_core.errors import DataError, LudicError

__all__ = [
    "MANIFEST",
    "CheckpointSaveError",
    "read_manifest",
    "save_torch_file",
    "sha256_of",
    "torch_load",
    "verify_checkpoint",
    "write_synced",
    "writing",
]

MANIFEST = "manifest.json"
_HASH_CHUNK = 1 << 20
# Below this much free space a failed write is reported as a full disk: torch's zip writer reports
# one as "unexpected pos ..." with no errno.
_LOW_SPACE_BYTES = 16 << 20


class CheckpointSaveError(LudicError, OSError):
    """A checkpoint could not be written; the message names the checkpoint, the file and the cause."""


def save_torch_file(obj: Any, path: Path) -> None:
    import torch

    with path.open("wb") as f:
        torch.save(obj, f)
        f.flush()
        os.fsync(f.fileno())


@contextlib.contextmanager
def writing(file: Path, checkpoint: str) -> Iterator[None]:
    """Name the checkpoint, the file and the cause of a failed write (see :class:`CheckpointSaveError`)."""
    try:
        yield
    except (OSError, RuntimeError) as e:
        if isinstance(e, CheckpointSaveError):
            raise
        try:
            free: int | None = shutil.disk_usage(file.parent).free
        except OSError:
            free = None
        full = getattr(e, "errno", None) == errno.ENOSPC or (free is not None and free < _LOW_SPACE_BYTES)
        cause = "no space left on the device" if full else f"{type(e).__name__}: {e}"
        space = f"{free} bytes free" if free is not None else "free space unknown"
        raise CheckpointSaveError(
            f"checkpoint {checkpoint}: writing {file.name} failed ({cause}; {space} on {file.parent}). "
            f"The previous checkpoints are intact. Original error: {type(e).__name__}: {e}"
        ) from e


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(_HASH_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def read_manifest(path: Path) -> dict[str, Any]:
    """The checkpoint's manifest; :class:`DataError` when it is missing or unreadable."""
    manifest = path / MANIFEST
    if not manifest.is_file():
        raise DataError(f"{manifest}: missing, so the checkpoint's files cannot be verified")
    try:
        data = json.loads(manifest.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise DataError(f"{manifest}: unreadable manifest ({e})") from e
    if not isinstance(data, dict) or not isinstance(data.get("files"), dict):
        raise DataError(f"{manifest}: not a checkpoint manifest (no 'files' mapping)")
    return data


def verify_checkpoint(path: Path) -> None:
    """Raise :class:`DataError` naming the first file of ``path`` that is missing or differs from the
    manifest (size, then sha256), or the manifest itself when it is missing or unreadable."""
    manifest = read_manifest(path)
    for name, entry in sorted(manifest["files"].items()):
        file = path / name
        if not file.is_file():
            raise DataError(f"{file}: listed in {MANIFEST} but missing")
        size = file.stat().st_size
        if size != entry.get("bytes"):
            raise DataError(f"{file}: {size} bytes but {MANIFEST} records {entry.get('bytes')} (truncated?)")
        digest = sha256_of(file)
        if digest != entry.get("sha256"):
            raise DataError(f"{file}: sha256 {digest} does not match {MANIFEST} ({entry.get('sha256')})")


def torch_load(path: Path) -> Any:
    """``torch.load(weights_only=True)`` with failures named by file: torch's own messages suggest
    ``weights_only=False``, which would run whatever code a tampered file holds."""
    import torch

    try:
        return torch.load(path, weights_only=True, map_location="cpu")
    except FileNotFoundError as e:
        raise DataError(f"{path}: missing; the checkpoint is incomplete, resume from another one") from e
    except (pickle.UnpicklingError, RuntimeError, EOFError, ValueError, zipfile.BadZipFile, OSError) as e:
        raise DataError(
            f"{path}: could not be read with torch.load(weights_only=True) ({type(e).__name__}); the file "
            "is corrupt or was not written by CheckpointManager. Resume from another checkpoint (an older "
            "step, or resume_from='latest' to fall back automatically); do not load it with "
            "weights_only=False"
        ) from e


def write_synced(path: Path, data: bytes) -> None:
    with path.open("wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
