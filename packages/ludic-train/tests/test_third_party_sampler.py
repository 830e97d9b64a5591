"""A package Ludic does not know adds a sampler by entry point alone: a real ``*.dist-info`` with an
``entry_points.txt`` in a directory on ``PYTHONPATH`` registers the kind ``counting`` in
``ludic.samplers``, and ``ludic train tictactoe-grpo backend.kind=counting`` trains with it end to end:
its settings table is part of the run config, its opener samples every episode (it counts them into the
run directory), and the local Trainer trains on them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
TIMEOUT_S = 240

PLUGIN = textwrap.dedent(
    """
    from pathlib import Path

    import attrs

    from ludic_core.run.backends import ClientBackend, TokenizedClient
    from ludic_core.run.samplers import Sampler, SamplerKind


    @attrs.frozen(kw_only=True)
    class CountingSettings:
        report: str = "counted.json"


    def sampler():
        return SamplerKind(
            summary="the local model, every completion counted",
            extends="local",
            open="ludic_counting_sampler:open_sampler",
            tables={"counting": CountingSettings},
        )


    class CountingClient:
        def __init__(self, inner):
            self.inner, self.completions = inner, 0

        async def complete_tokens(self, request):
            self.completions += 1
            return await self.inner.complete_tokens(request)

        async def get_policy_version(self):
            return await self.inner.get_policy_version()

        async def aclose(self):
            await self.inner.aclose()


    async def open_sampler(config, model, tokenizer, *, run_dir, dry_run, export):
        from ludic_train.local_client import LocalPolicyClient

        local = LocalPolicyClient(model, tokenizer, seed=config.seed)
        client = CountingClient(local)

        async def close():
            Path(run_dir, config.counting.report).write_text(str(client.completions))

        return Sampler(
            backend=ClientBackend(TokenizedClient(client, tokenizer)),
            publisher=local.as_publisher(),
            description="counting sampler",
            close=close,
        )
    """
)


def _install_plugin(site: Path) -> None:
    (site / "ludic_counting_sampler.py").write_text(PLUGIN)
    dist = site / "ludic_counting_sampler-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: ludic-counting-sampler\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text("[ludic.samplers]\ncounting = ludic_counting_sampler:sampler\n")


@pytest.mark.slow
def test_a_sampler_registered_by_entry_point_trains_end_to_end(tmp_path: Path) -> None:
    site = tmp_path / "site"
    site.mkdir()
    _install_plugin(site)
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")])),
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
    }
    run = tmp_path / "run"
    done = subprocess.run(
        [sys.executable, "-m", "ludic_core.cli", "train", "tictactoe-grpo",
         str(EXAMPLES / "tic_tac_toe" / "grpo_smoke.toml"), "backend.kind=counting",
         "counting.report=completions.txt", "run.checkpoint_every=0", f"run_dir={run}"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=TIMEOUT_S,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    config = json.loads((run / "config.json").read_text())
    assert config["backend"]["kind"] == "counting"
    assert config["counting"] == {"report": "completions.txt"}
    summary = json.loads((run / "summary.json").read_text())
    assert summary["steps"] == 2
    # 2 steps of 2 prompts x 2 samples, then 4 evaluation games: every move came through the sampler.
    assert int((run / "completions.txt").read_text()) >= 2 * 2 * 2 + 4

    refused = subprocess.run(
        [sys.executable, "-m", "ludic_core.cli", "train", "tictactoe-grpo", "backend.kind=countin", "--dry-run"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=TIMEOUT_S,
    )  # fmt: skip
    assert refused.returncode == 2
    assert "backend.kind = 'countin': not a registered sampler; did you mean 'counting'?" in refused.stderr
