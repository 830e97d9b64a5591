"""The GPU check: what only a CUDA machine can show, in one run of at most 8 minutes, as one JSON summary.

    python tools/gpu_check.py                 # on a machine with a GPU, vLLM (CUDA build) and the packages
    python tools/gpu_check.py --dry-run       # anywhere: every step at a CPU-sized stand-in (CI runs this)

Steps, each a command of its own with its own time limit (a failing step is recorded and the next runs):

1. ``gpu-tests`` — the ``gpu``-marked tests (NCCL weight updates into a real vLLM server on CUDA); the
   JUnit report gives run / failed / skipped (they need two GPUs, and skip on one, saying so).
2. ``trainer`` — ``bench/bench_trainer_logits.py`` on CUDA: a training step of SmolLM2's widths.
3. ``local-sampler`` — ``bench/bench_local_client.py`` on CUDA: the in-process sampler's tokens/s.
4. ``weight-sync`` — ``bench/bench_weight_sync.py``: weight-push time against model size.
5. ``rl-recipe`` — ``ludic train tictactoe-grpo backend.kind=vllm`` for 3 steps on the tiny Llama, its own vLLM server
   started by the run (``vllm.start_server``) and the trainer on CUDA: step time, trained and sampled
   tokens/s and the weight-push time, from the run's ``metrics.jsonl``.

``--dry-run`` runs the same steps on the CPU at a size that takes seconds: the tests are only collected
(imports and marks resolve), the benchmarks run on ``cpu`` at a tiny size, the recipe resolves and
builds its config (``ludic train --dry-run``), so no step's command can rot unnoticed. The summary
(``--out``, default ``runs/gpu_check/summary.json``) holds each step's command, exit status, time and
result, and a ``headline``; ``--save-result`` also keeps it as ``bench/results/gpu_check.json``, from
which ``tools/benchmarks_page.py`` shows it (a dry run is never kept there).
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import time
import xml.etree.ElementTree as ElementTree
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

from _machine import machine_facts  # noqa: E402

# The whole run, GPU time included: what a session lent a GPU can spend on it.
BUDGET_S = 480
# Each dry-run step's limit: it checks that the commands work, on whatever CPU (a loaded one too).
DRY_LIMIT_S = 300
RECIPE_STEPS = 3
# The dry run's benchmark sizes: short sequences on one thread (the CPU it runs on may be shared).
TINY_TRAINER = ("--prompt-min", "8", "--prompt-max", "12", "--actions", "2", "--threads", "1")
TINY_SAMPLER = ("--prompt-len", "8", "--prefix-len", "4", "--new-tokens", "2", "--threads", "1")
# Where the `gpu`-marked tests are (the NCCL weight updates into a real vLLM server: two GPUs).
GPU_TESTS = "packages/ludic-vllm/tests"


@attrs.frozen
class Step:
    """One command: its arguments on the GPU and in the dry run, its time limit, and how its output
    becomes a result (``read(stdout, work_dir)``)."""

    name: str
    gpu: tuple[str, ...]
    dry: tuple[str, ...]
    limit_s: int
    read: Callable[[str, Path], dict[str, Any]]


def _bench_json(stdout: str, _work: Path) -> dict[str, Any]:
    result = json.loads(stdout)
    if not isinstance(result, dict):
        raise ValueError(f"the benchmark printed {type(result).__name__}, not a JSON object")
    return {"headline": result.get("headline"), "skipped": result.get("skipped"), "result": result}


def _junit_counts(stdout: str, work: Path) -> dict[str, Any]:
    suites = ElementTree.parse(work / "gpu-tests.xml").getroot()
    collected = re.search(r"(\d+)(?:/\d+)? tests? collected", stdout)
    counts = {"collected": int(collected.group(1)) if collected else 0}
    counts.update({"tests": 0, "failures": 0, "errors": 0, "skipped": 0})
    for suite in suites.iter("testsuite"):
        for key in counts:
            counts[key] += int(suite.get(key, 0))
    return counts


def _recipe_metrics(_stdout: str, work: Path) -> dict[str, Any]:
    """Per-step perf metrics of the run (medians over its steps after the first, which warms up)."""
    metrics = work / "rl-run" / "metrics.jsonl"
    if not metrics.exists():  # the dry run resolves the config and writes no metrics
        return {"metrics": None}
    rows = [json.loads(line) for line in metrics.read_text(encoding="utf-8").splitlines() if line.strip()]
    steps = [row for row in rows if "perf/step_s" in row]
    timed = steps[1:] or steps

    def median(key: str) -> float | None:
        values = sorted(row[key] for row in timed if isinstance(row.get(key), (int, float)))
        return values[len(values) // 2] if values else None

    keys = ("perf/step_s", "perf/batch_wait_s", "perf/train_s", "perf/publish_s", "perf/tokens_per_s")
    out: dict[str, Any] = {"steps": len(steps), **{key: median(key) for key in keys}}
    completion = median("train/avg_completion_length")
    samples = median("train/num_samples")
    wait = out["perf/batch_wait_s"]
    if completion is not None and samples is not None and wait:
        out["sampled_tokens_per_s"] = completion * samples / wait
    return out


def steps(work: Path) -> list[Step]:
    python = sys.executable
    model = work / "tiny-llama"
    recipe = (
        "train",
        "tictactoe-grpo",
        "examples/tic_tac_toe/grpo_vllm_smoke.toml",
        f"backend.model={model}",
        f"steps={RECIPE_STEPS}",
        f"trainer.eval_every_steps={RECIPE_STEPS}",
        f"run_dir={work / 'rl-run'}",
    )
    server_args = "--served-model-name tiny --dtype float32 --max-model-len 512 --gpu-memory-utilization 0.3"
    pytest = (python, "-m", "pytest", GPU_TESTS, "-p", "no:cacheprovider", "-m", "gpu")
    # The `ludic` command of this Python's environment (a venv's bin need not be on PATH).
    beside = Path(python).parent / "ludic"
    ludic = str(beside) if beside.exists() else "ludic"
    trainer = (python, "bench/bench_trainer_logits.py")
    sampler = (python, "bench/bench_local_client.py")
    return [
        Step(
            "build-model",
            (
                python,
                "-c",
                f"from ludic_vllm.testing import build_tiny_llama; build_tiny_llama({str(model)!r})",
            ),
            (
                python,
                "-c",
                f"from ludic_vllm.testing import build_tiny_llama; build_tiny_llama({str(model)!r})",
            ),
            60,
            lambda _stdout, _work: {"model": str(model)},
        ),
        Step(
            "gpu-tests",
            (*pytest, f"--junitxml={work / 'gpu-tests.xml'}", "-q", "-rs"),
            (*pytest, f"--junitxml={work / 'gpu-tests.xml'}", "--collect-only", "-q"),
            150,
            _junit_counts,
        ),
        Step(
            "trainer",
            (*trainer, "--device", "cuda", "--dtype", "bfloat16", "--layers", "30", "--items", "32"),
            (*trainer, "--device", "cpu", "--layers", "1", "--items", "2", "--repeats", "1", *TINY_TRAINER),
            45,
            _bench_json,
        ),
        Step(
            "local-sampler",
            (
                *sampler,
                "--model",
                "tiny",
                "--device",
                "cuda",
                "--layers",
                "30",
                "--requests",
                "64",
                "--new-tokens",
                "64",
            ),
            (
                *sampler,
                "--model",
                "tiny",
                "--device",
                "cpu",
                "--layers",
                "1",
                "--requests",
                "2",
                "--modes",
                "greedy",
                *TINY_SAMPLER,
            ),
            45,
            _bench_json,
        ),
        Step(
            "weight-sync",
            (python, "bench/bench_weight_sync.py"),
            (python, "bench/bench_weight_sync.py", "--help"),
            60,
            _bench_json_or_help,
        ),
        Step(
            "rl-recipe",
            (
                ludic,
                *recipe,
                "backend.device=cuda",
                "vllm.start_server=true",
                f"vllm.server_args={json.dumps(server_args)}",
            ),
            (ludic, *recipe, "--dry-run"),
            150,
            _recipe_metrics,
        ),
    ]


def _bench_json_or_help(stdout: str, work: Path) -> dict[str, Any]:
    return {"help": True} if stdout.lstrip().startswith("usage:") else _bench_json(stdout, work)


def run_step(step: Step, command: tuple[str, ...], limit_s: float, work: Path) -> dict[str, Any]:
    record: dict[str, Any] = {"command": list(command), "limit_s": round(limit_s)}
    executable = shutil.which(command[0])
    if executable is None:
        return {**record, "ok": False, "error": f"{command[0]!r} is not on PATH"}
    started = time.monotonic()
    try:
        done = subprocess.run(
            command, cwd=ROOT, capture_output=True, text=True, timeout=max(1.0, limit_s), check=False
        )
    except subprocess.TimeoutExpired as timeout:
        tail = timeout.stderr or ""
        tail = tail.decode(errors="replace") if isinstance(tail, bytes) else tail
        return {
            **record,
            "ok": False,
            "error": f"no exit within {limit_s:.0f} s",
            "stderr_tail": tail[-2000:],
        }
    record.update(rc=done.returncode, wall_s=round(time.monotonic() - started, 1))
    if done.returncode != 0:
        return {**record, "ok": False, "stderr_tail": done.stderr[-3000:], "stdout_tail": done.stdout[-1000:]}
    try:
        record["result"] = step.read(done.stdout, work)
    except (ValueError, OSError, KeyError, ElementTree.ParseError) as error:
        return {
            **record,
            "ok": False,
            "error": f"unreadable output: {error}",
            "stdout_tail": done.stdout[-1000:],
        }
    return {**record, "ok": True}


def _gpu_name() -> str | None:
    try:
        import torch
    except ImportError:
        return None
    return torch.cuda.get_device_name(0) if torch.cuda.is_available() else None


def headline(records: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The numbers the benchmarks page shows, from the steps that ran."""
    out: dict[str, Any] = {"steps ok": f"{sum(r['ok'] for r in records.values())} of {len(records)}"}
    tests = records.get("gpu-tests", {}).get("result")
    if tests and tests["tests"]:
        out["gpu tests: run / failed / skipped"] = (
            f"{tests['tests']} / {tests['failures'] + tests['errors']} / {tests['skipped']}"
        )
    for name in ("trainer", "local-sampler", "weight-sync"):
        bench = records.get(name, {}).get("result") or {}
        for key, value in (bench.get("headline") or {}).items():
            out[f"{name}: {key}"] = value
    recipe = records.get("rl-recipe", {}).get("result") or {}
    for key, label in (
        ("perf/step_s", "RL step (s)"),
        ("perf/tokens_per_s", "RL trained tokens/s"),
        ("sampled_tokens_per_s", "RL sampled tokens/s"),
        ("perf/publish_s", "RL weight push (s)"),
    ):
        if recipe.get(key) is not None:
            out[label] = round(recipe[key], 3)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--dry-run", action="store_true", help="every step at a CPU-sized stand-in")
    parser.add_argument("--out", type=Path, default=ROOT / "runs" / "gpu_check" / "summary.json")
    parser.add_argument(
        "--save-result", action="store_true", help="also keep the summary as bench/results/gpu_check.json"
    )
    parser.add_argument("--budget-s", type=float, default=BUDGET_S, help="the whole GPU run's limit")
    parser.add_argument("--only", nargs="+", help="run only these steps (build-model always runs)")
    args = parser.parse_args(argv)
    if args.dry_run and args.save_result:
        parser.error("--save-result keeps a GPU run's summary; a dry run measures nothing")
    work = args.out.parent / "work"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    facts = {**machine_facts(), "gpu": _gpu_name()}
    deadline = time.monotonic() + args.budget_s
    records: dict[str, dict[str, Any]] = {}
    for step in steps(work):
        if args.only and step.name != "build-model" and step.name not in args.only:
            continue
        if args.dry_run:
            records[step.name] = run_step(step, step.dry, DRY_LIMIT_S, work)
        elif (left := deadline - time.monotonic()) < 5:
            records[step.name] = {"ok": False, "error": f"the {args.budget_s:.0f} s budget was spent"}
        else:
            records[step.name] = run_step(step, step.gpu, min(step.limit_s, left), work)
        print(f"gpu_check {step.name}: {'ok' if records[step.name]['ok'] else 'FAILED'}", file=sys.stderr)
    summary = {
        "benchmark": "gpu_check",
        "dry_run": args.dry_run,
        "machine": facts,
        "steps": records,
        "headline": headline(records),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    if args.save_result:
        (ROOT / "bench" / "results" / "gpu_check.json").write_text(
            json.dumps(summary) + "\n", encoding="utf-8"
        )
    print(json.dumps(summary["headline"], indent=2))
    return 0 if all(record["ok"] for record in records.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
