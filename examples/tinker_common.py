"""What the Tinker training examples share: the metrics shown on the console (the logging itself is
ludic-core's, as for the local Trainer), and the options that say which service to train on and whose tokenizer to use.

* ``--base-model`` / ``--base-url`` — the Tinker base model and deployment.
* ``--tokenizer DIR_OR_NAME`` — a local Hugging Face tokenizer directory (or a hub name) used instead
  of fetching the base model's tokenizer from the Hub; it must be the base model's tokenizer.
* ``--fake-service`` — a dry run: the recipe runs end to end against ``ludic_tinker.testing``'s
  loopback fake service (a tiny byte-level torch model under the ``--base-model`` name, with its byte
  tokenizer and a plain-text chat template), with no API key, no network and no Hub. It checks the
  wiring (requests, losses, sampler hand-over, evals), not what a real model learns.

    p = argparse.ArgumentParser(...)
    add_service_arguments(p)
    ...
    with open_service(args) as service:
        connect(base_url=service.base_url, api_key=service.api_key)
        tokenizer = await service.tokenizer_for(training_client)
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs

SHOWN_KEYS = ("train/loss", "train/num_items", "eval/accuracy", "eval/win_rate", "eval/mean_reward")
"""What the examples' console line shows (the JSON lines hold every metric)."""


DEFAULT_BASE_MODEL = "Qwen/Qwen3-4B-Instruct-2507"


def add_service_arguments(parser: argparse.ArgumentParser) -> None:
    """``--base-model``, ``--base-url``, ``--tokenizer`` and ``--fake-service``."""
    parser.add_argument("--base-model", default=DEFAULT_BASE_MODEL, help="a Tinker base model")
    parser.add_argument(
        "--base-url", default=None, help="Tinker service URL (default: TINKER_BASE_URL or prod)"
    )
    parser.add_argument(
        "--tokenizer",
        default=None,
        help="a local Hugging Face tokenizer directory (or a hub name) to use instead of the base "
        "model's from the Hub; it must be the base model's tokenizer. Unset: the base model's",
    )
    parser.add_argument(
        "--fake-service",
        action="store_true",
        help="dry run offline against ludic_tinker.testing's loopback fake Tinker service (a tiny "
        "byte-level model and tokenizer; no API key, network or Hub); needs ludic-tinker[torch]",
    )


def check_service_args(args: argparse.Namespace) -> None:
    """Refuse option combinations ``--fake-service`` cannot honour, naming the option and its value."""
    if not args.fake_service:
        return
    why = {
        "base_url": "the fake service listens on a loopback port of its own",
        "tokenizer": "the fake model's vocabulary is bytes: it uses its own byte tokenizer",
        "resume": "the fake keeps checkpoints in memory, for one run only",
    }
    for name, reason in why.items():
        value = getattr(args, name, None)
        if value is not None:
            flag = "--" + name.replace("_", "-")
            raise SystemExit(f"--fake-service cannot be combined with {flag} {value!r}: {reason}")


def load_tokenizer(name_or_path: str) -> Any:
    """A Hugging Face tokenizer from a local directory, or else from a hub name (or its cache)."""
    from transformers import AutoTokenizer

    local = Path(name_or_path).expanduser()
    source = str(local) if local.is_dir() else name_or_path
    try:
        return AutoTokenizer.from_pretrained(source)
    except (OSError, ValueError) as exc:
        raise SystemExit(
            f"--tokenizer {name_or_path!r} is neither a tokenizer directory nor a loadable hub name: {exc}"
        ) from exc


@attrs.frozen
class ServiceWiring:
    """Where a Tinker example connects and what it tokenizes with (from :func:`open_service`)."""

    base_url: str | None
    """None: ``TINKER_BASE_URL`` or production."""
    api_key: str | None
    """None: ``TINKER_API_KEY``."""
    tokenizer: Any
    """None: the base model's, from the training client (the Hugging Face Hub or its cache)."""
    chat_template: Any
    """None: the agent's ``HFChatTemplate`` over the tokenizer."""

    async def tokenizer_for(self, training_client: Any) -> Any:
        if self.tokenizer is not None:
            return self.tokenizer
        return await asyncio.to_thread(training_client.get_tokenizer)


@contextlib.contextmanager
def open_service(
    args: argparse.Namespace,
    *,
    api_key: str | None = None,
    tokenizer: Any = None,
    chat_template: Any = None,
) -> Iterator[ServiceWiring]:
    """The service and tokenizer that ``args`` ask for. ``tokenizer`` / ``chat_template`` given by a
    caller win over ``--tokenizer`` and the fake's. With ``--fake-service`` the fake runs for the
    duration of the block, and a block that ends normally fails if the fake received any request the
    real service would reject."""
    check_service_args(args)
    if not args.fake_service:
        if tokenizer is None and args.tokenizer is not None:
            tokenizer = load_tokenizer(args.tokenizer)
        yield ServiceWiring(args.base_url, api_key, tokenizer, chat_template)
        return

    from ludic_tinker.testing import ByteChatTemplate, FakeTokenizer, fake_tinker_service

    # set_env=False: the example passes the URL and key to connect(); a user's TINKER_* stay untouched.
    with fake_tinker_service(seed=args.seed, base_models=(args.base_model,), set_env=False) as service:
        print(
            f"--fake-service: dry run against a loopback fake Tinker service at {service.base_url} "
            f"(a tiny byte-level model standing in for {args.base_model})",
            file=sys.stderr,
            flush=True,
        )
        if tokenizer is None:
            tokenizer = FakeTokenizer()
        yield ServiceWiring(
            service.base_url,
            service.api_key,
            tokenizer,
            chat_template if chat_template is not None else ByteChatTemplate(tokenizer),
        )
