"""``ludic serve <model> [...]``: the vLLM server with Ludic's weight-update routes, as a subcommand of
the ``ludic`` command (the same as ``ludic-vllm serve``; see :mod:`ludic_vllm.serve` for the options).
The server speaks the OpenAI API, so ``ludic eval --backend openai --base-url http://host:8000/v1``
evaluates the model it serves, and ``--backend vllm`` samples from it token by token (trainable
rollouts; :mod:`ludic_vllm.cli_backend`)."""

from __future__ import annotations

import argparse

from ludic_core.cli.command import Command
from ludic_vllm import serve

__all__ = ["COMMAND"]


def _run(args: argparse.Namespace) -> int:
    # serve.main replaces this process with vLLM's (exec); it returns only for --dry-run.
    serve.main(["serve", *args.argv])
    return 0


COMMAND = Command(
    help="start a vLLM server with Ludic's weight-update routes (OpenAI-compatible)",
    add_arguments=lambda _parser: None,
    run=_run,
    passthrough=True,
)
