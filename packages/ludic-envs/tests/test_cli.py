"""The ``ludic`` command end to end, run as a subprocess the way a user runs it: ``ludic envs``,
``ludic eval`` and ``ludic rollouts`` with the OpenAI backend against a real local HTTP server
(:mod:`openai_server`), and config errors. Needs only ludic-core and ludic-envs (no torch)."""

from __future__ import annotations

import asyncio
import json
import socket
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from openai_server import serve_openai

from ludic_core.errors import DataError
from ludic_core.rollout_log import read_rollouts
from ludic_core.saw_builder import build_saw_items

LUDIC = Path(sys.executable).with_name("ludic")
TIMEOUT_S = 120


async def ludic(*args: str, cwd: Path) -> tuple[int, str, str]:
    """Run the installed ``ludic`` script; returns (status, stdout, stderr)."""
    process = await asyncio.create_subprocess_exec(
        str(LUDIC), *args, cwd=cwd, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    try:
        out, err = await asyncio.wait_for(process.communicate(), TIMEOUT_S)
    except TimeoutError:
        process.kill()
        await process.wait()
        raise
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


def test_the_console_script_is_installed() -> None:
    assert LUDIC.exists(), f"no `ludic` script next to {sys.executable}; reinstall ludic-core"


async def test_envs_lists_the_registered_envs_one_line_each(tmp_path: Path) -> None:
    status, out, err = await ludic("envs", cwd=tmp_path)
    assert status == 0, err
    lines = {line.split()[0]: line for line in out.splitlines() if line and not line.startswith(("*", " "))}
    assert {"tictactoe", "gsm8k", "math", "code_exec"} <= set(lines)
    assert "*" in lines["tictactoe"].split()[1]  # it has an eval profile
    assert "one game" in lines["tictactoe"]


async def test_missing_command_names_its_package(tmp_path: Path) -> None:
    status, _out, err = await ludic("evl", cwd=tmp_path)
    assert status == 2 and "did you mean 'eval'?" in err


def _run_dir(tmp_path: Path, name: str) -> Path:
    return tmp_path / "runs" / name


async def _eval(tmp_path: Path, model: str, *extra: str) -> tuple[dict[str, float], Path, str]:
    async with serve_openai() as server:
        run_dir = _run_dir(tmp_path, model)
        status, out, err = await ludic(
            "eval",
            "tictactoe",
            "--backend",
            "openai",
            "--base-url",
            server.base_url,
            "--model",
            model,
            "-n",
            "6",
            "--run-dir",
            str(run_dir),
            "env_kwargs.agent_mark=X",
            *extra,
            cwd=tmp_path,
        )
        assert status == 0, err
        assert server.requests and all(r["model"] == model for r in server.requests)
        assert server.requests[0]["messages"][0]["role"] == "system"  # the env's suggested prompt
        assert server.requests[0]["temperature"] == 1.0 and server.requests[0]["max_tokens"] == 16
    return json.loads((run_dir / "metrics.json").read_text()), run_dir, out


async def test_eval_openai_backend_plays_legal_games(tmp_path: Path) -> None:
    metrics, run_dir, out = await _eval(tmp_path, "first-legal")
    assert metrics["num_rollouts"] == 6 and metrics["num_failed_episodes"] == 0
    assert metrics["parse_error_rate"] == 0.0 and metrics["illegal_rate"] == 0.0
    assert metrics["win_rate"] + metrics["draw_rate"] + metrics["loss_rate"] == pytest.approx(1.0)
    records = [json.loads(line) for line in (run_dir / "records.jsonl").read_text().splitlines()]
    counts = Counter(r["outcome"] for r in records)
    assert metrics["win_rate"] == pytest.approx(counts["win"] / 6)
    assert "win_rate" in out and "accuracy" in out
    # The run directory holds the resolved config (rerunnable) and the package versions.
    config = json.loads((run_dir / "config.json").read_text())
    assert config["backend"]["model"] == "first-legal" and config["env_kwargs"] == {"agent_mark": "X"}
    assert "ludic-core" in json.loads((run_dir / "versions.json").read_text())["packages"]
    # Every episode is logged, and message-level rollouts are marked and refused for training.
    rollouts = list(read_rollouts(run_dir / "episodes.jsonl"))
    assert len(rollouts) == 6
    assert all(s.info["token_level"] is False for r in rollouts for s in r.agent_steps)
    with pytest.raises(DataError, match="message-level"):
        build_saw_items(rollouts[:1], {(rollouts[0].id, s.index): 1.0 for s in rollouts[0].steps})


async def test_eval_spreads_episodes_over_several_servers(tmp_path: Path) -> None:
    async with serve_openai() as first, serve_openai() as second:
        status, _out, err = await ludic(
            "eval", "tictactoe", "--backend", "openai", "--model", "first-legal", "-n", "8",
            "--base-url", first.base_url, "--base-url", second.base_url, "--run-dir", "run",
            cwd=tmp_path,
        )  # fmt: skip
        assert status == 0, err
        assert first.requests and second.requests  # both servers answered
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert metrics["num_rollouts"] == 8 and metrics["num_failed_episodes"] == 0
    config = json.loads((tmp_path / "run" / "config.json").read_text())
    assert config["backend"]["base_urls"] == [first.base_url, second.base_url]


async def test_eval_counts_parse_errors_and_illegal_moves(tmp_path: Path) -> None:
    garbage, _, _ = await _eval(tmp_path, "garbage")
    assert garbage["parse_error_rate"] == 1.0 and garbage["accuracy"] == 0.0
    always_a1, _, _ = await _eval(tmp_path, "always-a1")
    assert always_a1["illegal_rate"] == 1.0  # A1 is legal once, then occupied


async def test_eval_pass_at_k_over_samples(tmp_path: Path) -> None:
    metrics, _, _ = await _eval(tmp_path, "first-legal", "-k", "3", "pass_k=[1, 3]")
    assert metrics["num_rollouts"] == 18
    assert 0.0 <= metrics["pass@1"] <= metrics["pass@3"] <= 1.0


async def test_eval_with_a_wrong_model_name_exits_non_zero_naming_the_cause(tmp_path: Path) -> None:
    async with serve_openai() as server:
        status, out, err = await ludic(
            "eval", "tictactoe", "--backend", "openai", "--base-url", server.base_url,
            "--model", "no-such-model", "-n", "3", "--run-dir", "run",
            cwd=tmp_path,
        )  # fmt: skip
    assert status != 0, out
    assert "3 of 3 episodes failed" in err and "max_failure_rate=0.5" in err
    assert "HTTP 404 for model 'no-such-model'" in err and "unknown model no-such-model" in err
    assert "is in run/episodes.jsonl" in err and "Traceback" not in err
    assert len(list(read_rollouts(tmp_path / "run" / "episodes.jsonl"))) == 3  # every episode logged


async def test_eval_against_a_dead_url_exits_non_zero_naming_the_cause(tmp_path: Path) -> None:
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        dead_url = f"http://127.0.0.1:{probe.getsockname()[1]}/v1"
    status, out, err = await ludic(
        "eval", "tictactoe", "--backend", "openai", "--base-url", dead_url, "--model", "m", "-n", "2",
        "--run-dir", "run", "backend.max_retries=0",
        cwd=tmp_path,
    )  # fmt: skip
    assert status != 0, out
    assert "2 of 2 episodes failed" in err and "stage 'client'" in err
    assert "TransportError" in err and dead_url in err and "Traceback" not in err


@pytest.mark.parametrize("command", ["eval", "rollouts"])
async def test_a_missing_data_file_is_refused_before_the_run_directory_exists(
    tmp_path: Path, command: str
) -> None:
    missing = tmp_path / "no-such" / "test.jsonl"
    output = ["-o", "out.jsonl"] if command == "rollouts" else []
    status, _out, err = await ludic(
        command, "gsm8k", "--model", "m", "--base-url", "http://127.0.0.1:9/v1", *output,
        "env_kwargs.split=test", f'env_kwargs.data_files.test="{missing}"',
        cwd=tmp_path,
    )  # fmt: skip
    assert status == 2, err
    assert f"data file {str(missing)!r} does not exist" in err and "Traceback" not in err
    assert not (tmp_path / "runs").exists()


async def test_rollouts_rerun_retries_the_failed_episodes(tmp_path: Path) -> None:
    output = tmp_path / "data.jsonl"
    async with serve_openai() as server:
        common = ["rollouts", "tictactoe", "--base-url", server.base_url, "-o", str(output), "-n", "2"]
        status, _out, err = await ludic(
            *common, "--model", "no-such-model", "--run-dir", "runs/a", cwd=tmp_path
        )
        assert status != 0 and "2 of 2 episodes failed" in err
        ledger = output.with_name("data.jsonl.requests.jsonl")
        assert not ledger.exists() or not ledger.read_text().strip()  # nothing counts as done
        # The model name fixed, the rerun collects both requests.
        status, _out, err = await ludic(
            *common, "--model", "first-legal", "--run-dir", "runs/b", cwd=tmp_path
        )
        assert status == 0, err
        counts = json.loads((tmp_path / "runs/b/counts.json").read_text())
        assert counts["skipped_done"] == 0 and counts["rollouts"] == 2 and counts["failed_episodes"] == 0
        assert len(ledger.read_text().splitlines()) == 2


@pytest.mark.parametrize(
    ("override", "expected"),
    [
        ("episode=3", "unknown key 'episode'; did you mean 'episodes'?"),
        ("backend.modle=x", "unknown key 'backend.modle'; did you mean 'backend.model'?"),
        ("episodes=2.5", "episodes = 2.5: expected int (got float)"),
        ("sampling.temperature=hot", "sampling.temperature = 'hot': expected float (got str)"),
    ],
)
async def test_config_errors_name_the_key_value_and_type(
    tmp_path: Path, override: str, expected: str
) -> None:
    status, _out, err = await ludic("eval", "tictactoe", "--model", "m", override, cwd=tmp_path)
    assert status == 2, err
    assert expected in err and "Traceback" not in err
    assert not (tmp_path / "runs").exists()  # refused before anything was created


async def test_config_file_and_unknown_env(tmp_path: Path) -> None:
    (tmp_path / "run.toml").write_text('env = "tictactoe"\n[backend]\nmodel = "m"\nmax_retries = "two"\n')
    status, _out, err = await ludic("eval", "--config", "run.toml", cwd=tmp_path)
    assert status == 2 and "backend.max_retries = 'two': expected int" in err
    status, _out, err = await ludic("eval", "tictactoe_typo", "--model", "m", cwd=tmp_path)
    assert status == 2 and "unknown env 'tictactoe_typo'" in err


async def test_rollouts_keep_filter_and_resume(tmp_path: Path) -> None:
    output = tmp_path / "data.jsonl"
    async with serve_openai() as server:
        common = ["rollouts", "tictactoe", "--base-url", server.base_url, "--model", "first-legal"]
        common += ["-o", str(output), "--keep", "success", "env_kwargs.agent_mark=X"]
        status, out, err = await ludic(*common, "-n", "4", "--run-dir", "runs/a", cwd=tmp_path)
        assert status == 0, err
        # The outcome of every rollout collected, as counts in counts.json and rates in the table.
        outcomes = json.loads((tmp_path / "runs/a/counts.json").read_text())["outcomes"]
        assert sum(outcomes.values()) == 4 and set(outcomes) <= {
            "win",
            "draw",
            "loss",
            "illegal",
            "parse_error",
        }
        assert all(f"{label}_rate" in out for label in outcomes)
        first_calls = len(server.requests)
        ledger = [
            json.loads(x) for x in output.with_name("data.jsonl.requests.jsonl").read_text().splitlines()
        ]
        assert sorted(e["request_id"] for e in ledger) == ["0.0", "1.0", "2.0", "3.0"]
        kept = list(read_rollouts(output))
        assert len(kept) == sum(e["kept"] for e in ledger)
        assert all(r.env_steps[-1].info["result"] in ("win", "draw") for r in kept)
        # Rerun with more episodes: only the new requests run.
        status, _out, err = await ludic(*common, "-n", "6", "--run-dir", "runs/b", cwd=tmp_path)
        assert status == 0, err
        counts = json.loads((tmp_path / "runs/b/counts.json").read_text())
        assert counts["skipped_done"] == 4 and counts["requests"] == 6
        assert counts["rollouts"] == 2 and len(server.requests) > first_calls  # only the new games ran
        assert len(output.with_name("data.jsonl.requests.jsonl").read_text().splitlines()) == 6
        # A rerun with another seed would mix datasets: refused.
        status, _out, err = await ludic(*common, "-n", "6", "--seed", "1", cwd=tmp_path)
        assert status == 2 and "resuming would mix two datasets" in err


def _first_prompts(requests: list[dict[str, Any]]) -> list[str]:
    """The opening user message of every episode a server answered (its first request)."""
    return [r["messages"][1]["content"] for r in requests if len(r["messages"]) == 2]


async def test_a_default_eval_plays_n_different_games_and_the_same_ones_again(tmp_path: Path) -> None:
    """No env_kwargs, greedy sampling: each of the 8 episodes starts from its own position, the agent
    on X and on O, and the same command replays the same episodes."""
    runs = []
    for run_dir in ("a", "b"):
        async with serve_openai() as server:
            status, _out, err = await ludic(
                "eval", "tictactoe", "--base-url", server.base_url, "--model", "first-legal", "-n", "8",
                "--run-dir", run_dir, cwd=tmp_path,
            )  # fmt: skip
            assert status == 0, err
            runs.append(server.requests)
    first = _first_prompts(runs[0])
    assert len(first) == 8 and len(set(first)) == 8
    assert sum("You play X." in p for p in first) == 4 and sum("You play O." in p for p in first) == 4
    # The same episodes, move for move (requests run concurrently, so their order may differ).
    assert sorted(json.dumps(r["messages"]) for r in runs[0]) == sorted(
        json.dumps(r["messages"]) for r in runs[1]
    )
    records = [
        sorted(
            (r["request_id"], r["total_reward"])
            for r in map(json.loads, (tmp_path / d / "records.jsonl").open())
        )
        for d in ("a", "b")
    ]
    assert records[0] == records[1]


async def test_vary_starts_false_leaves_the_env_seed_as_the_only_difference(tmp_path: Path) -> None:
    async with serve_openai() as server:
        status, _out, err = await ludic(
            "eval", "tictactoe", "--base-url", server.base_url, "--model", "first-legal", "-n", "4",
            "--run-dir", "run", "vary_starts=false", "env_kwargs.agent_mark=X", cwd=tmp_path,
        )  # fmt: skip
        assert status == 0, err
        assert len(set(_first_prompts(server.requests))) == 1  # the empty board, X to move, each time


async def test_rollouts_without_an_output_keep_them_in_the_run_directory(tmp_path: Path) -> None:
    async with serve_openai() as server:
        common = ["rollouts", "tictactoe", "--base-url", server.base_url, "--model", "first-legal", "-n", "2"]
        status, _out, err = await ludic(*common, "--run-dir", "runs/r", cwd=tmp_path)
        assert status == 0, err
        output = tmp_path / "runs" / "r" / "rollouts.jsonl"
        assert f"kept rollouts: {Path('runs/r/rollouts.jsonl')}" in err
        assert len(list(read_rollouts(output))) == 2
        assert not (tmp_path / "rollouts.jsonl").exists()  # nothing in the current directory
        config = json.loads((tmp_path / "runs" / "r" / "config.json").read_text())
        assert (config["output"], config["run_dir"]) == (str(Path("runs/r/rollouts.jsonl")), "runs/r")
        # Rerunning the run directory's config resumes the same collection: nothing left to do.
        status, _out, err = await ludic("rollouts", "--config", "runs/r/config.json", cwd=tmp_path)
        assert status == 0, err
        counts = json.loads((tmp_path / "runs" / "r" / "counts.json").read_text())
        assert counts["skipped_done"] == 2 and counts["rollouts"] == 0


async def test_rollouts_in_two_worker_processes_collect_the_same_games(tmp_path: Path) -> None:
    games: dict[str, list[Any]] = {}
    async with serve_openai() as server:
        for workers in ("1", "2"):
            status, _out, err = await ludic(
                "rollouts", "tictactoe", "--base-url", server.base_url, "--model", "first-legal", "-n", "4",
                "--workers", workers, "--run-dir", f"runs/w{workers}", cwd=tmp_path,
            )  # fmt: skip
            assert status == 0, err
            config = json.loads((tmp_path / f"runs/w{workers}/config.json").read_text())
            assert config["rollout"]["workers"] == int(workers)
            games[workers] = sorted(
                (r.meta["request_id"], [(s.prev_obs, s.action, s.reward) for s in r.env_steps])
                for r in read_rollouts(tmp_path / f"runs/w{workers}/rollouts.jsonl")
            )
    assert len(games["1"]) == 4 and games["2"] == games["1"]
