"""The vLLM worker extension: ``--worker-extension-cls ludic_vllm.worker.LudicWorkerExtension``.

vLLM appends this class to every worker's bases, so its methods run inside each worker process with the
worker's own attributes (``self.model_runner``, ``self.device``, ``self.vllm_config``) and are called
from the API process through ``engine_client.collective_rpc("ludic_…", args=…)``.

Rules that vLLM enforces or that keep us safe across versions: every method and attribute is prefixed
``ludic_``/``_ludic_`` (vLLM asserts that an extension shadows nothing on the worker), the class defines
no attributes besides methods, and RPC arguments are small JSON-like metadata — tensors travel over the
collective channel or through files.
"""

from __future__ import annotations

import glob
import os
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from ludic_core.errors import ConfigError, DataError
from ludic_vllm import _compat
from ludic_vllm.update_wire import Manifest

if TYPE_CHECKING:
    from ludic_vllm.collective import TensorGroup

__all__ = ["LudicWorkerExtension", "iter_safetensors_dir"]


def iter_safetensors_dir(path: str) -> Iterator[tuple[str, Any]]:
    """Yield ``(name, tensor)`` from every ``*.safetensors`` file of ``path`` (sorted), or from
    ``path`` itself if it is a file."""
    from safetensors import safe_open

    files = [path] if os.path.isfile(path) else sorted(glob.glob(os.path.join(path, "*.safetensors")))
    if not files:
        raise DataError(f"no *.safetensors files at {path!r}")
    for file in files:
        with safe_open(file, framework="pt", device="cpu") as f:
            for name in f.keys():  # noqa: SIM118 - safe_open handles are not mappings
                yield name, f.get_tensor(name)


class _Counted:
    """Wraps an iterator and counts what the consumer took, so a partial load is detected."""

    def __init__(self, it: Iterator[tuple[str, Any]]) -> None:
        self._it = it
        self.count = 0

    def __iter__(self) -> _Counted:
        return self

    def __next__(self) -> tuple[str, Any]:
        item = next(self._it)
        self.count += 1
        return item


class LudicWorkerExtension:
    """Weight-update methods mixed into every vLLM worker."""

    # -- version ----------------------------------------------------------------------------------

    def ludic_get_version(self) -> int:
        return int(getattr(self, "_ludic_version", 0))

    def ludic_set_version(self, version: int) -> int:
        self._ludic_version = int(version)
        return self._ludic_version

    # -- transport --------------------------------------------------------------------------------

    def ludic_group_rank(self, rank_offset: int) -> int:
        """This worker's rank in the trainer's group: offset + DP rank × (TP × PP) + rank in engine."""
        parallel = self.vllm_config.parallel_config  # type: ignore[attr-defined]
        per_engine = parallel.tensor_parallel_size * parallel.pipeline_parallel_size
        dp_rank = getattr(parallel, "data_parallel_rank", 0) or 0
        return int(rank_offset + dp_rank * per_engine + self.rank)  # type: ignore[attr-defined]

    def ludic_init_transport(
        self,
        transport: str,
        master_address: str,
        master_port: int,
        rank_offset: int,
        world_size: int,
        timeout_s: float,
    ) -> int:
        from ludic_vllm.collective import open_group

        if getattr(self, "_ludic_group", None) is not None:
            raise ConfigError("a weight transport is already open on this worker; close it first")
        rank = self.ludic_group_rank(rank_offset)
        self._ludic_group: TensorGroup | None = open_group(
            transport,
            host=master_address,
            port=master_port,
            rank=rank,
            world_size=world_size,
            timeout_s=timeout_s,
            device=self.device,  # type: ignore[attr-defined]
        )
        self._ludic_transport = transport
        return rank

    def ludic_close_transport(self) -> bool:
        group = getattr(self, "_ludic_group", None)
        self._ludic_group = None
        if group is None:
            return False
        group.close()
        return True

    # -- updates ----------------------------------------------------------------------------------

    def _ludic_apply(self, weights: Iterator[tuple[str, Any]], drain: Iterator[Any] | None = None) -> int:
        counted = _Counted(weights)
        try:
            _compat.reload_weights(self, counted)
        except BaseException:
            if drain is not None:
                # Keep the channel in step with the trainer, which is still sending.
                for _ in drain:
                    pass
            raise
        return counted.count

    def ludic_receive(
        self, manifest_json: list[dict[str, Any]], checksum: str, bucket_bytes: int
    ) -> dict[str, Any]:
        """Receive every tensor of the manifest from the trainer and load it in place."""
        from ludic_vllm.collective import receive_manifest

        group = getattr(self, "_ludic_group", None)
        if group is None:
            raise ConfigError("no weight transport is open on this worker; call /ludic/transport/init first")
        manifest = Manifest.from_json(manifest_json)
        if manifest.checksum != checksum:
            raise DataError(
                f"manifest checksum mismatch: trainer sent {checksum}, worker computed {manifest.checksum}"
            )
        started = time.monotonic()
        stream = receive_manifest(group, manifest, bucket_bytes=bucket_bytes)
        try:
            loaded = self._ludic_apply(stream, drain=stream)
            leftover = sum(1 for _ in stream)
        except BaseException:
            # The channel is out of step or broken: drop it so the next update starts clean.
            self.ludic_close_transport()
            raise
        if loaded + leftover != len(manifest) or leftover:
            self.ludic_close_transport()
            raise DataError(
                f"vLLM loaded {loaded} of {len(manifest)} tensors; the manifest does not fit this model"
            )
        sync = getattr(group, "synchronize", None)
        if sync is not None:
            sync()
        return {"tensors": loaded, "bytes": manifest.total_bytes, "took_s": time.monotonic() - started}

    def ludic_load_path(self, path: str) -> dict[str, Any]:
        """Load safetensors weights from a directory (or file) visible to the worker."""
        if not os.path.exists(path):
            raise DataError(f"weights path {path!r} does not exist on the worker's host")
        started = time.monotonic()
        loaded = self._ludic_apply(iter_safetensors_dir(path))
        return {"tensors": loaded, "took_s": time.monotonic() - started}
