"""Weight-sync latency on a real vLLM CPU server: a live update against a restart, across model sizes.

For each model size (random Llamas built from a config on ``ludic_vllm.testing``'s character tokenizer,
head_dim 64 as vLLM's CPU attention needs; nothing is downloaded) one ``ludic-vllm serve`` subprocess
is started on the model, then ``--rounds`` rounds alternate the two ways of getting new weights served:

* ``update`` — ludic-vllm's publishers push a full set of new weights to the running server through its
  weight-update routes, and return once the server reports the new version: ``GlooPublisher`` (CPU
  tensors over a Gloo group) and ``FilePublisher`` (safetensors in a directory the server reads). A
  publisher's first publish to a server also opens its channel; it is reported apart (``first``), and
  the ``--updates`` publishes after it are the steady state a training run sees every step.
* ``restart`` — what a run without live updates does: write the new weights as a checkpoint
  (safetensors + config + tokenizer), stop the server, start a new one on the checkpoint and wait until
  it is healthy. Reported whole and by part.

Each size's ratio ``update / restart`` (medians) is measured in the same run, on the same machine state,
with updates and restarts interleaved; sizes are compared by weight bytes and latency. Prints one JSON
object; when vLLM (or the ``publisher`` extra) is not installed it prints ``{"skipped": reason}`` and
exits 0 (the ``vllm`` nox session installs the CPU build). Run it alone: vLLM's engine is CPU-bound.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from _machine import emit, machine_facts

SIZES: dict[str, dict[str, int]] = {
    # ludic_vllm.testing.build_tiny_llama's shape: ~0.4M parameters.
    "tiny": {"hidden_size": 128, "intermediate_size": 256, "num_hidden_layers": 2, "num_attention_heads": 2},
    # ~13M parameters.
    "small": {
        "hidden_size": 512,
        "intermediate_size": 1536,
        "num_hidden_layers": 4,
        "num_attention_heads": 8,
    },
    # SmolLM2-135M's width and depth with the character vocabulary: ~106M parameters.
    "medium": {
        "hidden_size": 576,
        "intermediate_size": 1536,
        "num_hidden_layers": 30,
        "num_attention_heads": 9,
        "num_key_value_heads": 3,
    },
}

SERVER_ENV = {
    "VLLM_CPU_KVCACHE_SPACE": "1",
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "PYTHONWARNINGS": "ignore",
}
SERVER_ARGS = [
    "--served-model-name",
    "bench",
    "--dtype",
    "float32",
    "--max-model-len",
    "512",
    "--enforce-eager",
    "--device",
    "cpu",
    "--max-num-seqs",
    "16",
]


def missing_requirement() -> str | None:
    """Why this benchmark cannot run here, or None."""
    for module, why in (
        ("vllm", "vllm is not installed (the `vllm` nox session installs vllm-cpu)"),
        ("safetensors", "ludic-vllm's `publisher` extra is not installed (safetensors)"),
        ("transformers", "transformers is not installed (it builds the benchmark's models)"),
    ):
        if importlib.util.find_spec(module) is None:
            return why
    return None


def build_model(out: Path, size: str, tokenizer_dir: Path) -> Path:
    """A random Llama of ``size`` with the character tokenizer, saved as a servable directory."""
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    from ludic_vllm.testing import CHAR_VOCAB_SIZE

    shape = SIZES[size]
    config = LlamaConfig(
        vocab_size=CHAR_VOCAB_SIZE,
        max_position_embeddings=512,
        bos_token_id=1,
        eos_token_id=2,
        tie_word_embeddings=False,
        num_key_value_heads=shape.get("num_key_value_heads", shape["num_attention_heads"]),
        **{k: v for k, v in shape.items() if k != "num_key_value_heads"},
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = LlamaForCausalLM(config)
    model.save_pretrained(out, safe_serialization=True)
    AutoTokenizer.from_pretrained(str(tokenizer_dir)).save_pretrained(out)
    return out


def write_checkpoint(weights: Mapping[str, Any], source: Path, out: Path) -> None:
    """The restart path's checkpoint: the new weights as safetensors beside the model's config and tokenizer."""
    from safetensors.torch import save_file

    out.mkdir(parents=True)
    for path in source.iterdir():
        if path.is_file() and path.suffix != ".safetensors":
            shutil.copy2(path, out / path.name)
    save_file(dict(weights), str(out / "model.safetensors"))


def start_server(model_dir: Path, *, load_dir: Path, version: int, log_path: Path, timeout_s: float) -> Any:
    from ludic_vllm.launch import VLLMServer

    server = VLLMServer(
        str(model_dir),
        SERVER_ARGS,
        env=SERVER_ENV,
        load_dirs=[load_dir],
        initial_version=version,
        startup_timeout_s=timeout_s,
        log_path=log_path,
    )
    return server.start()


async def timed_publishes(
    make_publisher: Callable[[], Any],
    weights: list[Mapping[str, Any]],
    *,
    first_version: int,
    url: str,
    timeout_s: float,
) -> list[float]:
    """Publish each weight set in turn (versions counting up from ``first_version``); seconds per publish.

    Checks after each that the server reports the new version: a publish that returned early would time
    nothing.
    """
    from ludic_vllm import ServerControl

    publisher = make_publisher()
    seconds = []
    try:
        async with ServerControl(url, timeout_s=timeout_s) as control:
            for offset, new in enumerate(weights):
                version = first_version + offset
                start = time.perf_counter()
                await asyncio.wait_for(publisher.publish(new, version=version), timeout_s)
                seconds.append(time.perf_counter() - start)
                served = await control.version()
                if served != version:
                    raise RuntimeError(f"after publishing version {version} the server reports {served}")
    finally:
        await publisher.aclose()
    return seconds


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def measure_size(size: str, work: Path, tokenizer_dir: Path, args: argparse.Namespace) -> dict[str, Any]:
    from safetensors.torch import load_file

    from ludic_vllm import FilePublisher, GlooPublisher, PublishSettings
    from ludic_vllm.testing import perturbed

    model_dir = build_model(work / f"{size}-v0", size, tokenizer_dir)
    base = load_file(str(model_dir / "model.safetensors"))
    parameters = sum(t.numel() for t in base.values())
    weight_bytes = sum(t.numel() * t.element_size() for t in base.values())
    steps_dir = work / f"{size}-steps"
    steps_dir.mkdir()
    seed = iter(range(1, 1_000_000))

    def new_weights(n: int) -> list[dict[str, Any]]:  # made before the clock starts
        return [perturbed(base, seed=next(seed)) for _ in range(n)]

    version = 0
    start = time.perf_counter()
    server = start_server(
        model_dir,
        load_dir=steps_dir,
        version=version,
        log_path=work / f"{size}-0.log",
        timeout_s=args.timeout,
    )
    cold_start = time.perf_counter() - start
    updates: dict[str, dict[str, list[float]]] = {t: {"first": [], "steady": []} for t in ("gloo", "files")}
    restarts: dict[str, list[float]] = {"total": [], "checkpoint": [], "stop": [], "start": []}
    publishers: dict[str, Callable[[], Any]] = {
        "gloo": lambda: GlooPublisher(
            server.url, connect_timeout_s=args.timeout, settings=PublishSettings(timeout_s=args.timeout)
        ),
        "files": lambda: FilePublisher(
            server.url, steps_dir, keep_last=1, settings=PublishSettings(timeout_s=args.timeout)
        ),
    }
    try:
        for round_index in range(args.rounds):
            for transport, make in publishers.items():
                weights = new_weights(1 + args.updates)
                seconds = asyncio.run(
                    timed_publishes(
                        make, weights, first_version=version + 1, url=server.url, timeout_s=args.timeout
                    )
                )
                version += len(weights)
                updates[transport]["first"].append(seconds[0])
                updates[transport]["steady"].extend(seconds[1:])
            [weights_for_restart] = new_weights(1)
            version += 1
            checkpoint = work / f"{size}-v{version}"
            t0 = time.perf_counter()
            write_checkpoint(weights_for_restart, model_dir, checkpoint)
            t1 = time.perf_counter()
            server.stop()
            t2 = time.perf_counter()
            server = start_server(
                checkpoint,
                load_dir=steps_dir,
                version=version,
                log_path=work / f"{size}-{round_index + 1}.log",
                timeout_s=args.timeout,
            )
            t3 = time.perf_counter()
            for part, value in (
                ("checkpoint", t1 - t0),
                ("stop", t2 - t1),
                ("start", t3 - t2),
                ("total", t3 - t0),
            ):
                restarts[part].append(value)
            shutil.rmtree(checkpoint)
    finally:
        server.stop()
    restart = median(restarts["total"])
    update_s = {
        transport: {"first": median(v["first"]), "steady": median(v["steady"]), "samples": len(v["steady"])}
        for transport, v in updates.items()
    }
    return {
        "parameters": parameters,
        "weight_mb": weight_bytes / 2**20,
        "cold_start_s": cold_start,
        "update_s": update_s,
        "restart_s": {part: median(values) for part, values in restarts.items()},
        "restart_samples": len(restarts["total"]),
        "ratio_update_vs_restart": {
            transport: {"steady": v["steady"] / restart, "first": v["first"] / restart}
            for transport, v in update_s.items()
        },
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", nargs="+", default=["tiny", "small"], choices=sorted(SIZES))
    parser.add_argument("--rounds", type=int, default=2, help="update-then-restart rounds per size")
    parser.add_argument(
        "--updates", type=int, default=3, help="steady-state publishes per transport per round"
    )
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds any start or publish may take")
    args = parser.parse_args(argv)
    for name in ("rounds", "updates"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be >= 1, got {getattr(args, name)}")
    if not args.timeout > 0:
        parser.error(f"--timeout must be > 0, got {args.timeout}")

    facts = machine_facts()
    reason = missing_requirement()
    if reason is not None:
        emit({"benchmark": "weight_sync", "skipped": reason}, facts=facts, headline=None)
        return 0

    import vllm

    from ludic_vllm.testing import build_tiny_llama

    with tempfile.TemporaryDirectory(prefix="ludic-bench-weight-sync-") as tmp:
        work = Path(tmp)
        tokenizer_dir = build_tiny_llama(work / "tokenizer")
        models = {size: measure_size(size, work, tokenizer_dir, args) for size in args.sizes}
    smallest, largest = (
        min(models.values(), key=lambda m: m["weight_mb"]),
        max(models.values(), key=lambda m: m["weight_mb"]),
    )
    result = {
        "benchmark": "weight_sync",
        "vllm": vllm.__version__,
        "rounds": args.rounds,
        "updates_per_round": args.updates,
        "models": models,
        "ratio_update_vs_restart": {
            size: {t: v["steady"] for t, v in m["ratio_update_vs_restart"].items()}
            for size, m in models.items()
        },
        "largest_vs_smallest": {
            "weight_mb": largest["weight_mb"] / smallest["weight_mb"],
            "update_gloo": largest["update_s"]["gloo"]["steady"] / smallest["update_s"]["gloo"]["steady"],
            "update_files": largest["update_s"]["files"]["steady"] / smallest["update_s"]["files"]["steady"],
            "restart": largest["restart_s"]["total"] / smallest["restart_s"]["total"],
        },
    }
    headline: dict[str, Any] = {}
    for size, model in models.items():
        for transport, ratio in result["ratio_update_vs_restart"][size].items():
            headline[f"{size} ({model['weight_mb']:.0f} MB): {transport} update / restart"] = round(ratio, 3)
    emit(result, facts=facts, headline=headline)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
