"""The base install stays light: importing every module pulls in no heavy or optional dependency."""

from __future__ import annotations

import pkgutil
import subprocess
import sys

import ludic_envs

HEAVY = ("torch", "transformers", "datasets", "math_verify", "vllm", "aiohttp", "redis", "sympy")


def test_importing_every_module_pulls_in_nothing_heavy() -> None:
    modules = [m.name for m in pkgutil.walk_packages(ludic_envs.__path__, "ludic_envs.")]
    assert "ludic_envs.qa.gsm8k" in modules and "ludic_envs.codeexec.pool" in modules
    script = (
        "import importlib, sys\n"
        f"for name in {modules!r}:\n"
        "    importlib.import_module(name)\n"
        f"print([m for m in {HEAVY!r} if m in sys.modules])\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True
    )
    assert out.stdout.strip() == "[]", out.stdout + out.stderr


def test_missing_datasets_names_the_extra() -> None:
    script = (
        "import sys\n"
        "sys.modules['datasets'] = None  # as if the hf extra were not installed\n"
        "from ludic_envs.qa import load_rows\n"
        "try:\n"
        "    load_rows('openai/gsm8k', split='test')\n"
        "except ImportError as exc:\n"
        "    print(exc)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True
    )
    assert 'pip install "ludic-envs[hf]"' in out.stdout, out.stdout + out.stderr
