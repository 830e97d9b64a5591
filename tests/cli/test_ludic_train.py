"""``ludic recipes`` and ``ludic train``: the installed console script run as a subprocess on each
recipe's CPU smoke config (``examples/**/*_smoke.toml``, a random two-layer model): dry runs, short real
runs, config errors and resume."""

from __future__ import annotations

import importlib.util
import json
import os
import random
import shutil
import socket
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("ludic_train")
pytest.importorskip("peft")
pytest.importorskip("ludic_envs")
pytest.importorskip("ludic_agents")

ROOT = Path(__file__).resolve().parents[2]
TTT_GRPO = ROOT / "examples" / "tic_tac_toe" / "grpo_smoke.toml"
TTT_SFT = ROOT / "examples" / "tic_tac_toe" / "sft_smoke.toml"
TTT_SELFPLAY = ROOT / "examples" / "tic_tac_toe" / "selfplay_smoke.toml"
TOOL_USE = ROOT / "examples" / "calculator" / "tool_use_smoke.toml"
GSM8K_DATA = Path(os.environ.get("LUDIC_DATA_DIR", ROOT.parent / "shared" / "data")) / "gsm8k"
TIMEOUT_S = 300
# The local GSM8K files for the training and evaluation envs (a dry run builds both, and the hub is
# out of reach here); tests that use them skip without the files.
GSM8K_FILES = [
    f'{table}.data_files.{split}="{GSM8K_DATA / f"{split}.jsonl"}"'
    for table in ("env_kwargs", "eval_env_kwargs")
    for split in ("train", "test")
]
needs_gsm8k = pytest.mark.skipif(
    not (GSM8K_DATA / "train.jsonl").is_file(),
    reason=f"no GSM8K data at {GSM8K_DATA}: set LUDIC_DATA_DIR to the folder holding gsm8k/train.jsonl",
)


def ludic(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    # The console script pip installed next to this interpreter: what a user types.
    script = Path(sys.executable).parent / "ludic"
    command = [str(script)] if script.exists() else [sys.executable, "-m", "ludic_core.cli"]
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
    }
    return subprocess.run(
        [*command, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=TIMEOUT_S
    )


def test_recipes_lists_each_recipe_on_one_line(tmp_path: Path) -> None:
    done = ludic("recipes", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    names = {line.split()[0] for line in done.stdout.splitlines() if line.strip()}
    expected = {
        "tictactoe-grpo",
        "tictactoe-selfplay",
        "tictactoe-sft",
        "calculator-tool-use",
        "gsm8k-grpo",
        "gsm8k-gspo",
    }
    assert expected <= names


def test_dry_run_prints_the_config_and_builds_every_component_without_a_run_dir(tmp_path: Path) -> None:
    done = ludic("train", "tictactoe-grpo", str(TTT_GRPO), "trainer.lr=1e-4", "--dry-run", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    resolved = json.loads(done.stdout[: done.stdout.rindex("}") + 1])
    assert resolved["recipe"] == "tictactoe-grpo"
    config = resolved["config"]
    assert config["backend"]["model"] == "tiny" and config["trainer"]["lr"] == 1e-4
    assert config["env"] == "tictactoe" and config["algorithm"] == "grpo"  # the recipe's defaults
    for component in ("model", "tokenizer", "engine", "algorithm", "trainer"):
        assert f"\n{component}: " in done.stdout
    # The training and evaluation envs were built and reset, as their first episodes will be.
    assert "\nenv: env 'tictactoe' built and reset" in done.stdout
    assert "\neval env: env 'tictactoe' built and reset" in done.stdout
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize("dry_run", [True, False])
def test_a_missing_data_file_is_refused_before_the_model_loads_and_leaves_no_run_dir(
    tmp_path: Path, dry_run: bool
) -> None:
    smoke = ROOT / "examples" / "gsm8k" / "grpo_smoke.toml"
    missing = tmp_path / "no-such" / "train.jsonl"
    done = ludic(
        "train", "gsm8k-grpo", str(smoke), f'env_kwargs.data_files.train="{missing}"', "run_dir=run",
        *(["--dry-run"] if dry_run else []),
        cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert f"data file {str(missing)!r} does not exist" in done.stderr and "Traceback" not in done.stderr
    assert not (tmp_path / "run").exists() and not (tmp_path / "runs").exists()


@pytest.mark.parametrize(
    ("override", "expected"),
    [
        ("trainer.lrr=1e-4", "unknown key 'trainer.lrr'; did you mean 'trainer.lr'?"),
        ("samples_per_prompt=2.5", "samples_per_prompt = 2.5: expected int"),
        ("backend.model=5", "backend.model = 5: expected str"),
        ("algorithm=grpoo", "algorithm = 'grpoo': not a registered algorithm; did you mean 'grpo'"),
        ("backend.kind=openai", "backend.kind = 'openai'"),
    ],
)
def test_config_errors_are_refused_before_anything_runs(tmp_path: Path, override: str, expected: str) -> None:
    done = ludic("train", "tictactoe-grpo", str(TTT_GRPO), override, cwd=tmp_path)
    assert done.returncode == 2
    assert expected in done.stderr
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "runs").exists()


def test_resume_needs_a_train_run_directory_of_the_same_recipe(tmp_path: Path) -> None:
    nowhere = ludic("train", "--resume", "nowhere", cwd=tmp_path)
    assert nowhere.returncode == 2 and "not a `ludic train` run directory" in nowhere.stderr
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.json").write_text(json.dumps({"model": "tiny", "data": ["x.jsonl"]}))
    (run / "recipe.json").write_text(json.dumps({"recipe": "tictactoe-sft"}))
    other = ludic("train", "tictactoe-grpo", "--resume", "run", cwd=tmp_path)
    assert other.returncode == 2 and "is a 'tictactoe-sft' run, not 'tictactoe-grpo'" in other.stderr
    no_train = ludic("train", cwd=tmp_path)
    assert no_train.returncode == 2 and "which recipe?" in no_train.stderr


def test_an_unknown_recipe_lists_the_installed_ones(tmp_path: Path) -> None:
    done = ludic("train", "tictactoe-grop", cwd=tmp_path)
    assert done.returncode == 2
    assert "unknown recipe 'tictactoe-grop'; did you mean 'tictactoe-grpo'" in done.stderr


def test_a_bad_run_config_file_is_named_with_the_key_path(tmp_path: Path) -> None:
    (tmp_path / "run.toml").write_text("steps = 2\n[trainer]\nlrr = 1e-4\n")
    done = ludic("train", "tictactoe-grpo", "run.toml", cwd=tmp_path)
    assert done.returncode == 2
    assert "config file 'run.toml': unknown key 'trainer.lrr'; did you mean 'trainer.lr'?" in done.stderr
    (tmp_path / "broken.toml").write_text("steps = \n")
    done = ludic("train", "tictactoe-grpo", "broken.toml", cwd=tmp_path)
    assert done.returncode == 2 and "config file 'broken.toml' is not valid toml" in done.stderr
    assert "line 1" in done.stderr and "Traceback" not in done.stderr


def test_grpo_run_writes_its_run_dir_and_resume_continues_from_the_latest_checkpoint(tmp_path: Path) -> None:
    done = ludic("train", "tictactoe-grpo", str(TTT_GRPO), "run_dir=run", "run.save_final=true", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    # No library warning on a run this small (each one it printed had a cause to fix).
    assert "Warning" not in done.stderr, done.stderr
    # One short line per step with the key numbers; every metric is in metrics.jsonl.
    lines = [line for line in done.stdout.splitlines() if line.startswith("[trainer] step")]
    train_lines = [line for line in lines if "| reward=" in line]
    assert [line.split(" | ")[0] for line in train_lines] == ["[trainer] step 1", "[trainer] step 2"]
    assert all("loss=" in line and "step_s=" in line and len(line) < 100 for line in train_lines), lines
    assert any("eval_accuracy=" in line for line in lines)
    run = tmp_path / "run"
    assert (run / "final" / "config.json").is_file()  # the trained model, merged
    config = json.loads((run / "config.json").read_text())
    assert config["steps"] == 2 and config["run_dir"] == "run"
    versions = json.loads((run / "versions.json").read_text())["packages"]
    assert {"ludic-core", "ludic-train", "torch"} <= set(versions)
    assert json.loads((run / "recipe.json").read_text()) == {"recipe": "tictactoe-grpo"}
    metrics = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert {m["step"] for m in metrics} == {1, 2}
    assert any("eval/win_rate" in m.get("stats", m) for m in metrics)
    assert sorted(p.name for p in (run / "checkpoints").glob("step_*")) == ["step_000001", "step_000002"]

    again = ludic("train", "tictactoe-grpo", str(TTT_GRPO), "run_dir=run", cwd=tmp_path)
    assert again.returncode == 2 and "--resume" in again.stderr  # never trains over an earlier run

    resumed = ludic("train", "--resume", "run", "steps=3", cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    assert "trained to step 3" in resumed.stderr
    assert json.loads((run / "summary.json").read_text())["steps"] == 3
    assert json.loads((run / "config.json").read_text())["steps"] == 3
    assert json.loads((run / "history" / "0" / "config.json").read_text())["steps"] == 2  # the first leg
    # Only step 3 was trained: the resumed run started from checkpoint 2.
    steps = [json.loads(line)["step"] for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert steps.count(3) >= 1 and steps.count(1) == 1


def _jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _trained(rollouts: list[dict[str, Any]]) -> list[dict[str, Any]]:
    # Evaluation requests carry a request_id ("i.j"); training groups come from the GRPO strategy.
    return [r for r in rollouts if "request_id" not in r["meta"]["request_meta"]]


def test_selfplay_warms_up_then_trains_one_policy_in_both_seats_a_group_per_seat(tmp_path: Path) -> None:
    done = ludic("train", "tictactoe-selfplay", str(TTT_SELFPLAY), "run_dir=run", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "Warning" not in done.stderr, done.stderr
    run = tmp_path / "run"
    # The rules-only teacher played 4 games against itself: a rollout per seat, every game played out.
    warm = _jsonl(run / "warm_start.jsonl")
    assert len(warm) == 4 * 2 and sorted(r["meta"]["agent_id"] for r in warm) == ["o"] * 4 + ["x"] * 4
    assert all(r["steps"][-1]["info"]["result"] in ("win", "draw", "loss") for r in warm)
    # Board-only prompts: no turn's prompt grows with the dialog (the list of free cells shrinks).
    for rollout in warm:
        lengths = [len(step["trace"]["prompt_token_ids"]) for step in rollout["steps"]]
        assert lengths == sorted(lengths, reverse=True), lengths
    summary = json.loads((run / "summary.json").read_text())
    assert summary["steps"] == 2
    assert {k: summary["warm_start"][k] for k in ("teacher", "episodes", "rollouts", "steps")} == {
        "teacher": "tictactoe_rules",
        "episodes": 4,
        "rollouts": 8,
        "steps": 2,
    }
    assert "[warm start] SFT on " in done.stdout
    # 2 steps x 2 games x 2 samples, each game a rollout per seat; GRPO groups are (game, seat).
    trained = _trained(_jsonl(run / "rollouts.jsonl"))
    assert len(trained) == 2 * 2 * 2 * 2
    groups: dict[tuple[str, str], int] = {}
    for r in trained:
        key = (r["meta"]["request_meta"]["group_id"], r["meta"]["agent_id"])
        groups[key] = groups.get(key, 0) + 1
    assert len(groups) == 2 * 2 * 2 and set(groups.values()) == {2}
    assert {seat for _, seat in groups} == {"x", "o"}
    # The evaluation is self-play too, scored per seat by the env's profile.
    evals = [m for m in _jsonl(run / "metrics.jsonl") if "eval/num_rollouts" in m]
    assert evals and evals[-1]["eval/num_rollouts"] == 2 * 4 and "eval/opponent_illegal_rate" in evals[-1]


def test_tool_use_warms_up_on_the_teachers_calls_then_trains_the_tool_agent(tmp_path: Path) -> None:
    done = ludic("train", "calculator-tool-use", str(TOOL_USE), "run_dir=run", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "Warning" not in done.stderr, done.stderr
    run = tmp_path / "run"
    # The teacher's episodes went through the calculator agent: its calls ran and gave numbers, and
    # every answer reached the env (one SFT item per episode: the whole turn is one sequence).
    warm = _jsonl(run / "warm_start.jsonl")
    assert len(warm) == 8 and all(r["steps"][-1]["kind"] == "env" for r in warm)
    calls = [s for r in warm for s in r["steps"] if s.get("tool_calls")]
    assert calls and all(c["name"] == "calculator" for s in calls for c in s["tool_calls"])
    assert all(res["content"].isdigit() for s in calls for res in s["tool_results"])
    summary = json.loads((run / "summary.json").read_text())
    assert summary["steps"] == 2 and summary["warm_start"]["items"] == 8
    # GRPO trained the same agent: the calculator prompt, up to three model calls per episode.
    trained = _trained(_jsonl(run / "rollouts.jsonl"))
    assert len(trained) == 2 * 2 * 2
    first = trained[0]["steps"][0]
    assert first["prompt_messages"][0]["content"].startswith("You answer arithmetic questions exactly.")
    assert all(sum(s["kind"] == "agent" for s in r["steps"]) <= 3 for r in trained)
    evals = [m for m in _jsonl(run / "metrics.jsonl") if "eval/num_episodes" in m]
    assert evals and evals[-1]["eval/num_episodes"] == 4 and "eval/correct_rate" in evals[-1]


@pytest.mark.parametrize(
    ("recipe", "smoke", "override", "expected"),
    [
        (
            "tictactoe-selfplay",
            TTT_SELFPLAY,
            "protocol=single_agent",
            "protocol = 'single_agent' plays one agent, and the env has agents ['x', 'o']",
        ),
        (
            "tictactoe-selfplay",
            TTT_SELFPLAY,
            "protocol=selfplay",
            "protocol = 'selfplay': not a registered protocol",
        ),
        (
            "calculator-tool-use",
            TOOL_USE,
            "agent=tool_chatt",
            "agent = 'tool_chatt': not a registered agent; did you mean 'tool_chat'",
        ),
        (
            "calculator-tool-use",
            TOOL_USE,
            "warm_start.teacher=calculater",
            "warm_start.teacher = 'calculater': not a registered scripted teacher; did you mean 'calculator'",
        ),
        ("calculator-tool-use", TOOL_USE, "warm_start.steps=0", "WarmStartSettings.steps"),
    ],
)
def test_bad_players_and_teachers_are_refused_before_anything_runs(
    tmp_path: Path, recipe: str, smoke: Path, override: str, expected: str
) -> None:
    done = ludic("train", recipe, str(smoke), override, cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    assert expected in done.stderr and "Traceback" not in done.stderr
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize(
    ("recipe", "config"),
    [
        ("tictactoe-selfplay", "tic_tac_toe/selfplay.toml"),
        ("calculator-tool-use", "calculator/tool_use.toml"),
    ],
)
def test_the_full_size_selfplay_and_tool_use_configs_validate_and_build(
    tmp_path: Path, recipe: str, config: str
) -> None:
    # The documented full runs, on the tiny model (two layers, so LoRA on the top one): every key
    # known, every value valid, the agent, its tool and the teacher built; nothing trained.
    done = ludic(
        "train",
        recipe,
        str(ROOT / "examples" / config),
        "backend.model=tiny",
        "lora.top_layers=1",
        "--dry-run",
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    assert f"dry run of {recipe!r}: every component built" in done.stderr
    assert "\nwarm start: ScriptedChatClient " in done.stdout


def test_sft_trains_on_rollouts_the_ludic_command_collected(tmp_path: Path) -> None:
    collected = ludic(
        "rollouts", "tictactoe", "--backend", "local", "--model", "tiny", "-n", "4", "output=games.jsonl",
        "--run-dir", "collect", cwd=tmp_path,
    )  # fmt: skip
    assert collected.returncode == 0, collected.stderr
    done = ludic("train", "tictactoe-sft", str(TTT_SFT), "run_dir=sft", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    summary = json.loads((tmp_path / "sft" / "summary.json").read_text())
    assert summary["steps"] == 2  # 4 games, one decision each at least, in batches of 2: >= 2 steps
    missing = ludic("train", "tictactoe-sft", str(TTT_SFT), "data=['nope.jsonl']", cwd=tmp_path)
    assert missing.returncode == 2 and "no such file 'nope.jsonl'" in missing.stderr


@needs_gsm8k
@pytest.mark.parametrize("recipe", ["gsm8k-grpo", "gsm8k-gspo"])
def test_gsm8k_recipes_train_on_the_real_rows(tmp_path: Path, recipe: str) -> None:
    algorithm = recipe.split("-")[1]
    smoke = ROOT / "examples" / "gsm8k" / f"{algorithm}_smoke.toml"
    done = ludic("train", recipe, str(smoke), *GSM8K_FILES, "run_dir=run", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    config = json.loads((tmp_path / "run" / "config.json").read_text())
    assert config["algorithm"] == algorithm and config["env"] == "gsm8k"
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["steps"] == 2
    rollouts = (tmp_path / "run" / "rollouts.jsonl").read_text().splitlines()
    # steps x prompts x group training episodes, then the evaluation's episodes on the test split
    assert len(rollouts) == 2 * 2 * 2 + 2
    metrics = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert any("eval/accuracy" in m.get("stats", m) for m in metrics)


def test_ludic_script_is_installed() -> None:
    assert shutil.which("ludic") or (Path(sys.executable).parent / "ludic").exists()


@pytest.fixture
def redis_url() -> Iterator[str]:
    pytest.importorskip("redis")
    from ludic_core.testing.redis import redis_url_for_tests

    yield from redis_url_for_tests()  # a private redis-server; a skip, saying why, where none is installed


def test_pipeline_learner_trains_on_what_an_actor_pushes_through_redis(
    tmp_path: Path, redis_url: str
) -> None:
    smoke = ROOT / "examples" / "pipeline_rl" / "pipeline_smoke.toml"
    shared = [str(smoke), f"pipeline.redis_url={redis_url}", "pipeline.weights_dir=weights"]
    dry = ludic("train", "pipeline-actor", *shared, "--dry-run", cwd=tmp_path)
    assert dry.returncode == 0, dry.stderr
    assert "\nactor: RedisPipelineActor" in dry.stdout
    learner = ludic_background("train", "pipeline-learner", *shared, "run_dir=learner", cwd=tmp_path)
    try:
        actor = ludic("train", "pipeline-actor", *shared, "run_dir=actor", cwd=tmp_path)
        assert actor.returncode == 0, actor.stderr
        _, learner_err = learner.communicate(timeout=TIMEOUT_S)
    finally:
        learner.kill()
    assert learner.returncode == 0, learner_err
    actor_summary = json.loads((tmp_path / "actor" / "summary.json").read_text())
    assert actor_summary["batches_pushed"] == 4 and actor_summary["items_pushed"] > 0
    learner_summary = json.loads((tmp_path / "learner" / "summary.json").read_text())
    assert learner_summary["steps"] == 2
    assert json.loads((tmp_path / "weights" / "latest.json").read_text())["version"] == 2


def ludic_background(*args: str, cwd: Path) -> subprocess.Popen[str]:
    script = Path(sys.executable).parent / "ludic"
    command = [str(script)] if script.exists() else [sys.executable, "-m", "ludic_core.cli"]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    return subprocess.Popen(
        [*command, *args], cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def test_tinker_recipe_dry_runs_and_trains_against_the_fake_service(tmp_path: Path) -> None:
    pytest.importorskip("ludic_tinker")
    pytest.importorskip("tinker")
    smoke = ROOT / "examples" / "tic_tac_toe" / "grpo_tinker_smoke.toml"
    dry = ludic("train", "tictactoe-grpo", str(smoke), "--dry-run", cwd=tmp_path)
    assert dry.returncode == 0, dry.stderr
    assert "\nalgorithm: grpo as Tinker loss 'ppo'" in dry.stdout
    # The same RL table as the local recipe: only the backend's own table differs.
    local = ludic("train", "tictactoe-grpo", "--dry-run", "backend.model=tiny", cwd=tmp_path)
    assert local.returncode == 0, local.stderr
    tinker_config = json.loads(dry.stdout[: dry.stdout.rindex("}") + 1])["config"]
    local_config = json.loads(local.stdout[: local.stdout.rindex("}") + 1])["config"]
    for key in ("env", "env_kwargs", "system_prompt", "sampling", "algorithm"):
        assert tinker_config[key] == local_config[key]
    # One vocabulary: every [trainer], [lora] and [run] key Tinker reads means the same locally.
    for table in ("trainer", "lora", "run"):
        assert set(tinker_config[table]) < set(local_config[table]), table
    assert tinker_config["trainer"]["lr"] == 4e-5 and tinker_config["lora"] == {"rank": 32}  # Tinker's
    assert "LoRA rank 32" in dry.stdout and "Adam lr 4e-05" in dry.stdout
    done = ludic("train", "tictactoe-grpo", str(smoke), "run_dir=run", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["steps"] == 2
    assert sorted(p.name for p in (tmp_path / "run" / "checkpoints").iterdir()) == [
        "step_00000001.json",
        "step_00000002.json",
    ]


@pytest.mark.parametrize(
    ("override", "reason"),
    [
        ("tinker.base_url=http://127.0.0.1:1", "a loopback port of its own"),
        ("tinker.tokenizer=some/tokenizer", "vocabulary is bytes"),
        ("algorithm=sapo", "Tinker cannot run the loss spec SAPO"),
        ("backend.model=Qwen/Qwen3-4B-Instruct-2507", "this recipe takes it from tinker.base_model"),
        ("tinker.lora_rank=4", "'tinker.lora_rank' was renamed: set 'lora.rank' instead"),
        (
            "tinker.adam.learning_rate=1e-4",
            "'tinker.adam.learning_rate' was renamed: set 'trainer.lr' instead",
        ),
        ("lora.rank=0", "Tinker trains LoRA adapters only"),
    ],
)
def test_tinker_recipe_refuses_what_it_cannot_honour(tmp_path: Path, override: str, reason: str) -> None:
    pytest.importorskip("ludic_tinker")
    smoke = ROOT / "examples" / "tic_tac_toe" / "grpo_tinker_smoke.toml"
    done = ludic("train", "tictactoe-grpo", str(smoke), override, cwd=tmp_path)
    assert done.returncode == 2 and reason in done.stderr, done.stderr
    assert not (tmp_path / "runs").exists()


# --- data-parallel runs under torchrun (2 gloo CPU ranks) ---------------------------------------------


def torchrun(*args: str, cwd: Path, nproc: int = 2) -> subprocess.CompletedProcess[str]:
    """``torchrun --nproc-per-node N -m ludic_core.cli ...`` on a free loopback port."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    launcher = [
        sys.executable, "-m", "torch.distributed.run", "--nnodes", "1", f"--nproc-per-node={nproc}",
        "--master-addr", "127.0.0.1", f"--master-port={port}", "-m", "ludic_core.cli",
    ]  # fmt: skip
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    return subprocess.run(
        [*launcher, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=TIMEOUT_S
    )


def _sft_items(path: Path, count: int) -> None:
    from ludic_core.saw import SAWItem
    from ludic_core.saw_io import write_saw_jsonl

    rng = random.Random(0)
    write_saw_jsonl(
        path,
        [
            SAWItem(
                input_ids=[rng.randrange(5, 400) for _ in range(9)], action_mask=[0] * 5 + [1] * 4, weight=1.0
            )
            for _ in range(count)
        ],
    )


@pytest.mark.slow
def test_sft_under_torchrun_shards_each_batch_and_resumes_each_ranks_position(tmp_path: Path) -> None:
    _sft_items(tmp_path / "items.jsonl", 8)
    common = [str(TTT_SFT), "data=['items.jsonl']", "batch_size=4", "run.checkpoint_every=1"]
    done = torchrun("train", "tictactoe-sft", *common, "run_dir=run", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-4000:]
    run = tmp_path / "run"
    assert json.loads((run / "summary.json").read_text())["steps"] == 2  # 8 items in global batches of 4
    assert done.stderr.count("run directory: run") == 1  # rank 0 alone prints and writes
    metrics = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics] == [1, 2]
    assert all(m.get("stats", m)["train/num_samples"] == 4 for m in metrics)  # both ranks' halves
    import torch

    state = torch.load(run / "checkpoints" / "step_000002" / "state.pt", weights_only=True)
    assert [s["position"] for s in state["batch_source_by_rank"]] == [4, 4]  # each rank's 2 x 2 items
    resumed = torchrun("train", "--resume", "run", "epochs=2", cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr[-4000:]
    assert json.loads((run / "summary.json").read_text())["steps"] == 4
    # A checkpoint of two ranks' positions does not resume in one process.
    single = ludic("train", "--resume", "run", "epochs=3", cwd=tmp_path)
    assert single.returncode != 0 and "resume with 2 rank(s)" in single.stderr


@pytest.mark.slow
def test_on_policy_recipe_under_torchrun_is_refused_naming_the_pipeline(tmp_path: Path) -> None:
    done = torchrun("train", "tictactoe-grpo", str(TTT_GRPO), "run_dir=run", cwd=tmp_path)
    assert done.returncode != 0
    assert (
        "samples the episodes from the model being trained" in done.stderr
        and "pipeline-learner" in done.stderr
    )
    assert not (tmp_path / "run").exists()


@pytest.mark.slow
def test_tinker_recipe_under_torchrun_is_refused(tmp_path: Path) -> None:
    pytest.importorskip("ludic_tinker")
    smoke = ROOT / "examples" / "tic_tac_toe" / "grpo_tinker_smoke.toml"
    done = torchrun("train", "tictactoe-grpo", str(smoke), "run_dir=run", cwd=tmp_path)
    assert done.returncode != 0
    assert "the Tinker recipes train on Tinker's service, so they run as one process" in done.stderr
    assert not (tmp_path / "run").exists()


@pytest.mark.redis
@pytest.mark.slow
def test_two_learner_ranks_claim_two_actors_batches_exactly_once(tmp_path: Path, redis_url: str) -> None:
    import redis

    smoke = ROOT / "examples" / "pipeline_rl" / "pipeline_smoke.toml"
    queue = f"ludic-test:{uuid.uuid4().hex[:12]}"
    shared = [
        str(smoke), f"pipeline.redis_url={redis_url}", f"pipeline.queue_key={queue}",
        "pipeline.weights_dir=weights", "run.checkpoint_every=1",
    ]  # fmt: skip
    actors = [
        ludic_background("train", "pipeline-actor", *shared, f"run_dir=actor-{i}", cwd=tmp_path)
        for i in (0, 1)
    ]
    try:
        learner = torchrun("train", "pipeline-learner", *shared, "run_dir=learner", cwd=tmp_path)
        assert learner.returncode == 0, learner.stderr[-4000:]
        for actor in actors:
            _, err = actor.communicate(timeout=TIMEOUT_S)
            assert actor.returncode == 0, err[-4000:]
        # Each rank trained one actor batch per step: 2 steps, 2 batches per rank, each batch once.
        assert json.loads((tmp_path / "learner" / "summary.json").read_text())["steps"] == 2
        client = redis.Redis.from_url(redis_url)
        trained = [client.lrange(f"{queue}:trained:learner-{rank}", 0, -1) for rank in (0, 1)]
        assert [len(t) for t in trained] == [2, 2] and not set(trained[0]) & set(trained[1])
        assert client.llen(queue) == 8 - 4  # two actors x 4 batches pushed, 4 trained
        assert json.loads((tmp_path / "weights" / "latest.json").read_text())["version"] == 2
        # Resuming both ranks continues each one's claims: a third step takes one new batch per rank.
        resumed = torchrun("train", "--resume", "learner", "steps=3", cwd=tmp_path)
        assert resumed.returncode == 0, resumed.stderr[-4000:]
        assert [client.llen(f"{queue}:trained:learner-{rank}") for rank in (0, 1)] == [3, 3]
        assert client.llen(queue) == 2
    finally:
        for actor in actors:
            if actor.poll() is None:
                actor.kill()


# --- the RL recipes with backend.kind=vllm (ludic-vllm's sampler) without a vLLM server: dry runs (which
# build the client and the publisher but contact nothing), the config errors refused before anything is
# built, and the old recipe names refused with the new spelling. The run against a real vLLM server is ludic-vllm's test_vllm_recipe.py.

needs_ludic_vllm = pytest.mark.skipif(
    importlib.util.find_spec("ludic_vllm") is None, reason="ludic-vllm is not installed"
)
TTT_GRPO_VLLM = ROOT / "examples" / "tic_tac_toe" / "grpo_vllm_smoke.toml"
# The smoke config's model is a tiny Llama served by vLLM; a dry run builds the local random "tiny" (with
# the config's chat template, found from any working directory).
TINY = (
    "backend.model=tiny",
    f"chat_template={ROOT / 'examples' / 'tic_tac_toe' / 'plain_chat_template.jinja'}",
)


@pytest.mark.parametrize("kind", ["vllm", "tinker"])
def test_a_recipe_name_that_named_its_backend_is_refused_with_the_new_spelling(
    tmp_path: Path, kind: str
) -> None:
    done = ludic("train", f"tictactoe-grpo-{kind}", "--dry-run", cwd=tmp_path)
    assert done.returncode == 2
    assert (
        f"recipe 'tictactoe-grpo-{kind}' was renamed: use `ludic train tictactoe-grpo backend.kind={kind}`"
        in done.stderr
    )


@needs_ludic_vllm
def test_dry_run_builds_client_and_publisher_and_says_it_contacted_no_server(tmp_path: Path) -> None:
    # Nothing listens on this port: a dry run that tried to connect would fail or wait.
    done = ludic(
        "train", "tictactoe-grpo", str(TTT_GRPO_VLLM), *TINY, "vllm.urls=http://127.0.0.1:9",
        "--dry-run", cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    config = json.loads(done.stdout[: done.stdout.rindex("}") + 1])["config"]
    assert config["vllm"]["transport"] == "gloo" and config["backend"]["kind"] == "vllm"
    assert config["env"] == "tictactoe" and config["trainer"]["max_grad_norm"] == 0.5  # tictactoe-grpo's
    sampler = next(line for line in done.stdout.splitlines() if line.startswith("sampler: "))
    assert "http://127.0.0.1:9 (not contacted: dry run)" in sampler and "GlooPublisher" in sampler
    assert not (tmp_path / "runs").exists()


@needs_ludic_vllm
def test_dry_run_with_start_server_starts_nothing(tmp_path: Path) -> None:
    done = ludic(
        "train", "tictactoe-grpo", str(TTT_GRPO_VLLM), *TINY, "vllm.start_server=true",
        "vllm.transport=upload", "--dry-run", cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "an export of the model (not started: dry run)" in done.stdout
    assert "FilePublisher" in done.stdout


@needs_ludic_vllm
@needs_gsm8k
def test_gsm8k_recipe_takes_the_local_recipes_defaults(tmp_path: Path) -> None:
    done = ludic("train", "gsm8k-grpo", "backend.kind=vllm", *TINY, *GSM8K_FILES, "--dry-run", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    config = json.loads(done.stdout[: done.stdout.rindex("}") + 1])["config"]
    assert config["env"] == "gsm8k" and config["samples_per_prompt"] == 8
    assert config["sampling"]["max_tokens"] == 256 and config["backend"]["kind"] == "vllm"


@needs_ludic_vllm
@pytest.mark.parametrize(
    ("override", "expected"),
    [
        ("backend.kind=local", "unknown key 'vllm'"),  # the [vllm] table is the vllm sampler's
        ("backend.base_urls=http://h:1/v1", "the server is configured by vllm.urls"),
        ("backend.max_concurrency=8", "the server is configured by vllm.max_concurrency"),
        ("backend.request_timeout_s=5", "the server is configured by vllm.timeout_s"),
        ("vllm.transport=smoke-signals", "vllm.transport = 'smoke-signals': expected Literal"),
        ("vllm.transport=files", "transport='files' needs weights_dir"),
        ("vllm.transport=nccl", "NCCL broadcasts from a CUDA device"),
        ("vllm.max_concurrency=0", "VLLMBackendConfig.max_concurrency must be an int >= 1, got 0"),
        ("vllm.timeout_s=0", "VLLMBackendConfig.timeout_s must be a finite number > 0"),
        (
            "vllm.start_server=true vllm.urls=http://gpu1:8000",
            "VLLMBackendConfig.urls = ['http://gpu1:8000'] with start_server = true: the run starts one",
        ),
        ("vllm.server_args=--enforce-eager", "without vllm.start_server"),
        ("vllm.url=http://gpu1:8000", "unknown key 'vllm.url'"),
        ("vllm.urls=[]", "VLLMBackendConfig.urls must list at least one server URL, got []"),
        ("vllm.urls=gpu1:8000", "VLLMBackendConfig.urls: 'gpu1:8000' is not an http(s) URL"),
        (
            "vllm.urls=['http://a:8000','http://b:8000','http://a:8000']",
            "VLLMBackendConfig.urls lists 'http://a:8000' more than once",
        ),
    ],
)
def test_config_errors_are_refused_before_anything_is_built(
    tmp_path: Path, override: str, expected: str
) -> None:
    done = ludic("train", "tictactoe-grpo", str(TTT_GRPO_VLLM), *override.split(), cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    assert expected in done.stderr
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "runs").exists()


@needs_ludic_vllm
def test_dry_run_with_several_servers_pools_their_clients(tmp_path: Path) -> None:
    done = ludic(
        "train", "tictactoe-grpo", str(TTT_GRPO_VLLM), *TINY,
        "vllm.urls=['http://127.0.0.1:9','http://127.0.0.1:10']", "--dry-run", cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    config = json.loads(done.stdout[: done.stdout.rindex("}") + 1])["config"]
    assert config["vllm"]["urls"] == ["http://127.0.0.1:9", "http://127.0.0.1:10"]
    sampler = next(line for line in done.stdout.splitlines() if line.startswith("sampler: "))
    assert sampler.startswith(
        "sampler: ClientPool for the vLLM server(s) at http://127.0.0.1:9, http://127.0.0.1:10"
    )
    assert "GlooPublisher" in sampler


@needs_ludic_vllm
@pytest.mark.slow
def test_vllm_recipe_dry_run_under_torchrun_splits_each_step_and_publishes_from_rank_0(
    tmp_path: Path,
) -> None:
    servers = "vllm.urls=['http://127.0.0.1:9','http://127.0.0.1:10']"
    done = torchrun(
        "train", "tictactoe-grpo", str(TTT_GRPO_VLLM), *TINY, servers, "--dry-run", cwd=tmp_path
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-4000:]
    # Rank 0 alone prints: its sampler holds the publisher, and the smoke config's 2 prompts split 1 + 1.
    assert done.stdout.count("sampler: ") == 1
    assert "GlooPublisher" in done.stdout and "(1 prompts on each of 2 ranks)" in done.stdout
    assert "FSDP" in done.stdout  # the model is sharded
    # Each step's prompts must split over the ranks, whole groups per rank.
    uneven = torchrun(
        "train", "tictactoe-grpo", str(TTT_GRPO_VLLM), *TINY, servers, "episodes=3", "--dry-run",
        cwd=tmp_path,
    )  # fmt: skip
    assert uneven.returncode != 0
    assert "episodes = 3 does not split over the 2 torchrun ranks" in uneven.stderr
    started = torchrun(
        "train", "tictactoe-grpo", str(TTT_GRPO_VLLM), *TINY, "vllm.start_server=true", "--dry-run",
        cwd=tmp_path,
    )  # fmt: skip
    assert started.returncode != 0 and "vllm.start_server = true under torchrun" in started.stderr
    assert not (tmp_path / "runs").exists()


@needs_ludic_vllm
@pytest.mark.parametrize(
    ("recipe", "config"),
    [
        ("tictactoe-grpo", "tic_tac_toe/grpo.toml"),
        ("tictactoe-grpo", "tic_tac_toe/grpo_vllm.toml"),
        pytest.param("gsm8k-grpo", "gsm8k/grpo.toml", marks=needs_gsm8k),
        pytest.param("gsm8k-grpo", "gsm8k/grpo_vllm.toml", marks=needs_gsm8k),
    ],
)
def test_the_full_size_example_configs_validate_and_build(tmp_path: Path, recipe: str, config: str) -> None:
    # The documented full runs, on the tiny model: every key is known, every value valid, nothing started
    # (GSM8K from the local files: the dry run builds the envs, and the hub is out of reach here).
    data = GSM8K_FILES if recipe.startswith("gsm8k") else []
    done = ludic(
        "train",
        recipe,
        str(ROOT / "examples" / config),
        "backend.model=tiny",
        *data,
        "--dry-run",
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    assert f"dry run of {recipe!r}: every component built" in done.stderr


def test_offline_rl_trains_on_token_level_rollouts_that_ludic_rollouts_collected(tmp_path: Path) -> None:
    # Collect: 2 prompts x 2 samples from the in-process tiny model, every rollout kept with its token
    # ids, behaviour logprobs and group (group_id, group_size).
    done = ludic(
        "rollouts", "tictactoe", "--backend", "local", "--model", "tiny", "-n", "2", "-k", "2",
        "--temperature", "1", "-o", "data.jsonl", "--run-dir", "collect",
        cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    rows = [json.loads(line) for line in (tmp_path / "data.jsonl").read_text().splitlines()]
    assert len(rows) == 4 and {r["meta"]["request_meta"]["group_size"] for r in rows} == {2}
    # Train: REINFORCE with the token-level importance ratio, which reads the behaviour logprobs.
    done = ludic(
        "train", "offline-rl", "model=tiny", 'data=["data.jsonl"]', "batch_size=4", "algorithm=reinforce",
        "algorithm_kwargs.importance_sampling=token", "run_dir=run",
        cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["steps"] == 1
    [step] = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    stats = step.get("stats", step)
    assert stats["train/num_samples"] == 4 and stats["train/grad_norm"] > 0
    # The rollouts were sampled by the weights being trained: the first step is on-policy.
    assert abs(stats["tis/mismatch_kl"]) < 1e-4 and stats["tis/weight_mean"] == pytest.approx(1.0, abs=1e-3)
    # GRPO (the default) credits the same rollouts by their groups.
    done = ludic("train", "offline-rl", "model=tiny", 'data=["data.jsonl"]', "--dry-run", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "\nalgorithm: grpo" in done.stdout and "\ndata: 4 items" in done.stdout
