"""The light install's `ludic` command, end to end: `ludic envs` and `ludic eval --backend openai`.

Run by the `isolated(ludic-envs)` nox session in the venv that holds only the ludic-core and ludic-envs
wheels and their declared dependencies: it checks that torch and transformers are not installed, then
drives the installed `ludic` console script against a real OpenAI-compatible HTTP server (aiohttp, a
ludic-core dependency) whose scripted model plays the first legal Tic-Tac-Toe move.

    python tools/check_light_cli.py
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import shutil
import sys
import tempfile
from pathlib import Path

# The scripted server of ludic-envs' CLI tests (not part of any wheel): one definition for both uses.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "packages" / "ludic-envs" / "tests"))

from openai_server import serve_openai

TIMEOUT_S = 120.0
EPISODES = 4


async def run_ludic(*args: str, cwd: Path) -> tuple[int, str, str]:
    ludic = shutil.which("ludic")
    if ludic is None:
        raise SystemExit("FAIL the `ludic` console script is not installed")
    process = await asyncio.create_subprocess_exec(
        ludic, *args, cwd=cwd, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    out, err = await asyncio.wait_for(process.communicate(), TIMEOUT_S)
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


async def main() -> int:
    heavy = [name for name in ("torch", "transformers") if importlib.util.find_spec(name) is not None]
    if heavy:
        print(f"FAIL the light install holds {heavy}")
        return 1
    with tempfile.TemporaryDirectory() as scratch:
        cwd = Path(scratch)
        status, envs, err = await run_ludic("envs", cwd=cwd)
        if status != 0 or "tictactoe" not in envs:
            print(f"FAIL ludic envs (exit {status}):\n{envs}\n{err}")
            return 1
        async with serve_openai() as server:
            status, out, err = await run_ludic(
                "eval", "tictactoe", "--backend", "openai", "--base-url", server.base_url,
                "--model", "first-legal", "-n", str(EPISODES), "--run-dir", "run", cwd=cwd,
            )  # fmt: skip
        if status != 0:
            print(f"FAIL ludic eval --backend openai (exit {status}):\n{out}\n{err}")
            return 1
        metrics = json.loads((cwd / "run" / "metrics.json").read_text())
        played = metrics["win_rate"] + metrics["draw_rate"] + metrics["loss_rate"]
        if metrics["num_rollouts"] != EPISODES or metrics["illegal_rate"] or abs(played - 1.0) > 1e-9:
            print(f"FAIL ludic eval played {metrics}")
            return 1
        episodes = (cwd / "run" / "episodes.jsonl").read_text().splitlines()
        print(
            f"light install: `ludic envs` printed {len(envs.splitlines())} lines; `ludic eval --backend openai` "
            f"played {len(episodes)} games (win {metrics['win_rate']:.2f}, draw {metrics['draw_rate']:.2f}, "
            f"loss {metrics['loss_rate']:.2f}) with {len(server.requests)} requests; no torch, no transformers"
        )
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
