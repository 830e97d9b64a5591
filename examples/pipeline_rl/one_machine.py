"""Pipeline RL on one machine: a private redis-server, one learner and N actors, each a `ludic train`
process, exactly as they run on separate machines (docs/multi-node.md).

    python examples/pipeline_rl/one_machine.py examples/pipeline_rl/pipeline_smoke.toml --actors 2
    python examples/pipeline_rl/one_machine.py my_run.toml steps=50 --learner-ranks 2   # torchrun learner

Every argument but --actors, --learner-ranks and --out goes to both `ludic train` commands (a run
config and key=value overrides). Needs the redis-server binary and ludic-train[redis].
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

from ludic_core.pipeline.local_server import local_redis_server


def ludic(*args: str) -> list[str]:
    return [sys.executable, "-m", "ludic_core.cli", *args]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--actors", type=int, default=1)
    parser.add_argument("--learner-ranks", type=int, default=1, help="> 1: the learner under torchrun")
    parser.add_argument("--out", type=Path, default=Path("runs/pipeline"))
    args, config = parser.parse_known_args()
    with local_redis_server() as redis_url:
        shared = [*config, f"pipeline.redis_url={redis_url}", f"pipeline.weights_dir={args.out / 'weights'}"]
        learner = ["train", "pipeline-learner", *shared, f"run_dir={args.out / 'learner'}"]
        if args.learner_ranks > 1:
            torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone"]
            command = [*torchrun, f"--nproc-per-node={args.learner_ranks}", "-m", "ludic_core.cli", *learner]
        else:
            command = ludic(*learner)
        learner_process = subprocess.Popen(command)
        actors = [
            subprocess.Popen(ludic("train", "pipeline-actor", *shared, f"run_dir={args.out / f'actor-{i}'}"))
            for i in range(args.actors)
        ]
        try:
            status = learner_process.wait()
        finally:
            for actor in actors:  # actors sample until told to stop (or pipeline.actor_batches)
                actor.terminate()
                actor.wait(timeout=120)
    return status


if __name__ == "__main__":
    sys.exit(main())
