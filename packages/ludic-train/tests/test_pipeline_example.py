"""CPU smoke run of examples/pipeline_rl: ``one_machine.py`` starts a private redis-server, the
``pipeline-learner`` recipe and two ``pipeline-actor`` processes on the smoke config, exactly as a user
runs it; the learner trains its steps on what the actors pushed and publishes its weights."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ludic_core.pipeline.local_server import find_redis_server

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "pipeline_rl"


@pytest.mark.redis
@pytest.mark.slow  # ~30 s: three processes importing torch and building the tiny model
def test_one_machine_script_runs_a_learner_and_two_actors(tmp_path: Path) -> None:
    if not (EXAMPLE / "one_machine.py").exists():
        pytest.skip(f"{EXAMPLE} is not part of this checkout (tests run from an sdist?)")
    if find_redis_server() is None:
        pytest.skip("no redis-server binary on PATH")
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
    }
    command = [
        sys.executable, str(EXAMPLE / "one_machine.py"), str(EXAMPLE / "pipeline_smoke.toml"),
        "--actors", "2", "--out", str(tmp_path / "run"),
    ]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=300, env=env, check=False)
    assert done.returncode == 0, done.stderr[-4000:]
    learner = json.loads((tmp_path / "run" / "learner" / "summary.json").read_text())
    assert learner["steps"] == 2
    assert json.loads((tmp_path / "run" / "weights" / "latest.json").read_text())["version"] == 2
    metrics = [
        json.loads(line) for line in (tmp_path / "run" / "learner" / "metrics.jsonl").read_text().splitlines()
    ]
    assert [m["step"] for m in metrics] == [1, 2]
