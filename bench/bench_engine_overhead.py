"""Rollout-engine overhead per env step, against a minimal hand-written loop in the same process.

Both sides play the same GuessNumber episodes (same env seeds, same scripted replies, same text
rendering and byte tokenisation, a zero-latency scripted client), so they make the same model calls and
env steps; the difference is what the engine adds: a fresh env and protocol per episode, the protocol's
timeline (AgentStep/EnvironmentStep objects, turn ids, truncation marks), seeds, meta and the semaphore.
A third measurement adds credit assignment and SAW-item building (``generate_batch``).

Prints one JSON object: seconds per env step for each side (best of ``--repeats``) and the ratios.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections.abc import Callable, Coroutine
from typing import Any

from _guess_number import INFERENCE, make_client, make_engine, requests

from ludic_core.credit import MonteCarloReturn
from ludic_core.inference import TokenCompletionRequest
from ludic_core.testing import ByteTokenizer, GuessNumberEnv
from ludic_core.testing.agent import render_text_dialog
from ludic_core.types import Message


async def baseline(episodes: int, max_steps: int) -> int:
    """The minimal loop: render, tokenise, call the client, step the env. Returns env steps taken."""
    client = make_client()
    encode = ByteTokenizer().encode
    steps = 0
    for episode in range(episodes):
        env = GuessNumberEnv()
        obs, _ = env.env_reset(seed=episode)
        messages: list[Message] = [{"role": "user", "content": obs}]
        for _ in range(max_steps):
            prompt = render_text_dialog(messages)
            request = TokenCompletionRequest.from_spec(
                encode(prompt), INFERENCE, seed=episode, prompt_text=prompt
            )
            response = await client.complete_tokens(request)
            messages.append({"role": "assistant", "content": response.text})
            outcome = env.env_step(response.text.strip())
            steps += 1
            if outcome.terminated or outcome.truncated:
                break
            messages.append({"role": "user", "content": outcome.obs})
    return steps


async def engine_rollouts(episodes: int, max_steps: int, concurrency: int) -> int:
    result = await make_engine().generate_rollouts(
        requests(episodes), max_steps=max_steps, concurrency=concurrency
    )
    return sum(len(r.env_steps) for r in result.rollouts)


async def engine_batch(episodes: int, max_steps: int, concurrency: int) -> int:
    engine = make_engine()
    batch = await engine.generate_batch(
        requests(episodes), max_steps=max_steps, concurrency=concurrency, credit_assigner=MonteCarloReturn()
    )
    return sum(1 for item in batch.items if item.meta["step_kind"] == "env")


def best_time(fn: Callable[[], Coroutine[Any, Any, int]], repeats: int) -> tuple[float, int]:
    best, steps = float("inf"), 0
    for _ in range(repeats):
        started = time.perf_counter()
        steps = asyncio.run(fn())
        best = min(best, time.perf_counter() - started)
    return best, steps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--episodes", type=int, default=500)
    parser.add_argument("--max-steps", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    n, k = args.episodes, args.max_steps

    t_base, s_base = best_time(lambda: baseline(n, k), args.repeats)
    t_seq, s_seq = best_time(lambda: engine_rollouts(n, k, 1), args.repeats)
    t_conc, s_conc = best_time(lambda: engine_rollouts(n, k, 64), args.repeats)
    t_batch, s_batch = best_time(lambda: engine_batch(n, k, 64), args.repeats)
    if len({s_base, s_seq, s_conc, s_batch}) != 1:
        print(f"step counts differ: {s_base=} {s_seq=} {s_conc=} {s_batch=}", file=sys.stderr)
        raise SystemExit(1)
    per_step = {
        name: t / s_base for name, t in [("baseline", t_base), ("engine_c1", t_seq), ("engine_c64", t_conc)]
    }
    per_step["engine_batch_c64"] = t_batch / s_base
    print(
        json.dumps(
            {
                "benchmark": "engine_overhead",
                "episodes": n,
                "max_steps": k,
                "env_steps": s_base,
                "seconds_per_env_step": per_step,
                "ratio_engine_c1_vs_baseline": t_seq / t_base,
                "ratio_engine_c64_vs_baseline": t_conc / t_base,
                "ratio_engine_batch_vs_baseline": t_batch / t_base,
                "overhead_us_per_env_step_c1": (t_seq - t_base) / s_base * 1e6,
            }
        )
    )


if __name__ == "__main__":
    main()
