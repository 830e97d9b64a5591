"""Rejection sampling: play Tic-Tac-Toe games and keep the ones whose total reward reaches a bar.

The kept rollouts (JSONL, one rollout per line) are SFT data for the ``tictactoe-sft`` recipe
(``ludic train tictactoe-sft examples/tic_tac_toe/sft.toml``).

    python examples/rejection_sampling.py --model smollm2 --episodes 200 --min-reward 1.0
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from pathlib import Path

from ludic_core import RolloutSettings

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
sys.path.insert(0, str(Path(__file__).resolve().parent / "tic_tac_toe"))


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    p.add_argument("--model", default="smollm2", help="HF directory, 'smollm2' or 'tiny'")
    p.add_argument("--episodes", type=int, default=50)
    p.add_argument("--max-steps", type=int, default=5)
    p.add_argument("--temperature", type=float, default=0.8)
    p.add_argument("--max-tokens", type=int, default=64)
    p.add_argument("--min-reward", type=float, default=1.0)
    p.add_argument("--opponent", default="random", choices=["random", "minimax", "mixed"])
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--output", type=Path, default=Path("runs/tictactoe/winners.jsonl"))
    return p.parse_args(argv)


async def main(args: argparse.Namespace) -> dict[str, int]:
    from common import eval_requests, make_engine

    from ludic_core.rollout_log import RolloutLog
    from ludic_train.cli_backend import load_local_model
    from ludic_train.local_client import LocalPolicyClient

    model, tokenizer = load_local_model(args.model, seed=args.seed, dtype="float32")
    client = LocalPolicyClient(model, tokenizer, seed=args.seed, max_batch_size=256)
    engine = make_engine(client, opponent=args.opponent, seed=args.seed)
    requests = eval_requests(
        episodes=args.episodes, temperature=args.temperature, max_tokens=args.max_tokens, seed=args.seed
    )
    result = await engine.generate_rollouts(
        requests, RolloutSettings(max_steps=args.max_steps, on_failure="continue")
    )
    kept = [r for r in result.rollouts if not r.failed and r.total_reward >= args.min_reward]
    written = RolloutLog(args.output).write(kept)
    summary = {"episodes": len(result.episodes), "rollouts": len(result.rollouts), "kept": written}
    print(
        f"kept {written} of {len(result.rollouts)} rollouts with total_reward >= {args.min_reward} -> {args.output}"
    )
    return summary


if __name__ == "__main__":
    asyncio.run(main(parse_args()))
