"""``ludic-vllm serve <model> [vllm args…]`` (also ``python -m ludic_vllm.serve``).

Runs stock vLLM's OpenAI server with, unless the caller set them, the Ludic worker extension
(``--worker-extension-cls ludic_vllm.worker.LudicWorkerExtension``), the routes (``--middleware
ludic_vllm.routes.LudicRoutes``), ``--generation-config vllm`` (so ``generation_config.json`` cannot
change sampling defaults) and ``--logprobs-mode processed_logprobs`` (logprobs of the distribution
sampled, as importance ratios need). Ludic's options (``--ludic-api-token``, ``--ludic-trust-loopback``,
``--ludic-load-dir``, ``--ludic-initial-version``) reach the server through its environment.
``--device cpu`` (or no CUDA) selects vLLM's CPU platform.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from ludic_vllm import _compat
from ludic_vllm._net import is_loopback
from ludic_vllm.routes import ENV_API_TOKEN, ENV_INITIAL_VERSION, ENV_LOAD_DIRS, ENV_TRUST_LOOPBACK

__all__ = ["build_command", "main"]

WORKER_EXTENSION = "ludic_vllm.worker.LudicWorkerExtension"
MIDDLEWARE = "ludic_vllm.routes.LudicRoutes"


def _has_flag(args: Sequence[str], flag: str) -> bool:
    return any(a == flag or a.startswith(flag + "=") for a in args)


def _flag_value(args: Sequence[str], flag: str) -> str | None:
    """The value of the last ``flag VALUE`` / ``flag=VALUE`` in ``args`` (vLLM's own parsing keeps the last)."""
    value = None
    for i, arg in enumerate(args):
        if arg == flag and i + 1 < len(args):
            value = args[i + 1]
        elif arg.startswith(flag + "="):
            value = arg.split("=", 1)[1]
    return value


def build_command(
    model: str, vllm_args: Sequence[str], *, python: str | None = None
) -> tuple[list[str], dict[str, str]]:
    """The argv and extra environment for a server process (without Ludic's own options)."""
    args = list(vllm_args)
    extra_env: dict[str, str] = {}
    injected: list[str] = []
    if not _has_flag(args, "--worker-extension-cls"):
        injected += ["--worker-extension-cls", WORKER_EXTENSION]
    if not _has_flag(args, "--middleware"):
        injected += ["--middleware", MIDDLEWARE]
    elif MIDDLEWARE not in args:
        injected += ["--middleware", MIDDLEWARE]  # vLLM accepts the flag repeatedly
    if not _has_flag(args, "--generation-config"):
        injected += ["--generation-config", "vllm"]
    if not _has_flag(args, "--logprobs-mode"):
        injected += ["--logprobs-mode", "processed_logprobs"]
    if _device_is_cpu(args):
        extra_env["VLLM_TARGET_DEVICE"] = "cpu"
    argv = [python or sys.executable, "-m", _compat.api_server_module(), "--model", model, *injected, *args]
    return argv, extra_env


def _device_is_cpu(args: Sequence[str]) -> bool:
    for i, a in enumerate(args):
        if a == "--device" and i + 1 < len(args):
            return args[i + 1] == "cpu"
        if a.startswith("--device="):
            return a.split("=", 1)[1] == "cpu"
    try:
        import torch

        return not torch.cuda.is_available()
    except ImportError:
        return True


def _strip_device(args: list[str]) -> list[str]:
    # Newer vLLM removed --device (the platform is detected); keep it out of vLLM's argv.
    out: list[str] = []
    skip = False
    for i, a in enumerate(args):
        if skip:
            skip = False
            continue
        if a == "--device" and i + 1 < len(args):
            skip = True
            continue
        if a.startswith("--device="):
            continue
        out.append(a)
    return out


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ludic-vllm serve",
        description="Start a vLLM server with the Ludic worker extension and /ludic/* routes. "
        "Arguments Ludic does not know are passed to vLLM.",
    )
    parser.add_argument("model")
    parser.add_argument("--ludic-api-token", default=None, help="bearer token required by weight routes")
    parser.add_argument(
        "--ludic-trust-loopback",
        action="store_true",
        help="without a token, let loopback callers change weights (needs a loopback --host)",
    )
    parser.add_argument(
        "--ludic-load-dir",
        action="append",
        default=[],
        metavar="DIR",
        help="a directory update_from_path and lora/load may read (repeatable; default: none)",
    )
    parser.add_argument("--ludic-initial-version", type=int, default=0, help="policy version at start-up")
    parser.add_argument("--dry-run", action="store_true", help="print the command instead of running it")
    return parser


def main(argv: Sequence[str] | None = None) -> None:
    """Entry point of the ``ludic-vllm`` console script."""
    args = list(sys.argv[1:] if argv is None else argv)
    usage = (
        "usage: ludic-vllm serve <model> [--ludic-api-token T | --ludic-trust-loopback] "
        "[--ludic-load-dir DIR]... [--ludic-initial-version N] [vllm args...]"
    )
    if args[:1] in (["-h"], ["--help"]):
        print(usage)
        return
    if not args or args[0] != "serve":
        print(usage, file=sys.stderr)
        raise SystemExit(2)
    parser = _parser()
    ns, vllm_args = parser.parse_known_args(args[1:])
    if ns.ludic_trust_loopback:
        host = _flag_value(vllm_args, "--host")
        if host is None or not is_loopback(host):
            parser.error(
                f"--ludic-trust-loopback needs the server bound to a loopback address (--host 127.0.0.1); "
                f"got --host {host!r} (vLLM's default binds every interface)"
            )
    missing = [d for d in ns.ludic_load_dir if not os.path.isdir(d)]
    if missing:
        parser.error(f"--ludic-load-dir: not a directory: {missing}")
    cpu = _device_is_cpu(vllm_args)
    cmd, extra_env = build_command(ns.model, _strip_device(vllm_args))
    if cpu:
        extra_env["VLLM_TARGET_DEVICE"] = "cpu"
    extra_env[ENV_INITIAL_VERSION] = str(ns.ludic_initial_version)
    if ns.ludic_api_token:
        extra_env[ENV_API_TOKEN] = ns.ludic_api_token
    if ns.ludic_trust_loopback:
        extra_env[ENV_TRUST_LOOPBACK] = "1"
    if ns.ludic_load_dir:
        extra_env[ENV_LOAD_DIRS] = os.pathsep.join(os.path.abspath(d) for d in ns.ludic_load_dir)
    if ns.dry_run:
        shown = " ".join(f"{k}={'***' if k == ENV_API_TOKEN else v}" for k, v in sorted(extra_env.items()))
        print(shown, " ".join(cmd))
        return
    os.execvpe(cmd[0], cmd, {**os.environ, **extra_env})


if __name__ == "__main__":
    main(["serve", *sys.argv[1:]])
