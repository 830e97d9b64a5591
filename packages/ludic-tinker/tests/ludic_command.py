"""The ``ludic`` command run as a subprocess (the tests' shared helper), with the real SDK in it and no
telemetry; ``service`` given: pointed at that fake service as the SDK takes it (``TINKER_BASE_URL``,
``TINKER_API_KEY``)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from ludic_tinker.testing import FAKE_API_KEY, FakeTinkerService

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
TIMEOUT_S = 240
SMALL = ("steps=2", "episodes=2", "samples_per_prompt=2", "eval_episodes=2", "trainer.eval_every_steps=2")
"""``ludic train`` overrides that cut a full-size example config to two small steps."""


def ludic(
    *args: str, cwd: Path, service: FakeTinkerService | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    service_env = (
        {} if service is None else {"TINKER_BASE_URL": service.base_url, "TINKER_API_KEY": FAKE_API_KEY}
    )
    return subprocess.run(
        [sys.executable, "-m", "ludic_core.cli", *args],
        cwd=cwd,
        env={**os.environ, "TINKER_TELEMETRY": "0", **service_env, **(env or {})},
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )
