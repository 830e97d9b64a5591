"""What the Tinker training examples share: the clip bands of ludic-train's presets, expressed as
Tinker loss thresholds, and a metrics log (the Tinker scripts do not depend on ludic-train)."""

from __future__ import annotations

import json
from pathlib import Path

GRPO_CLIP = (0.8, 1.27)
"""ludic-train's GRPO band ``[1 − 0.2, 1 + 0.27]``, as Tinker ``ppo`` thresholds."""
GSPO_CLIP = (1 - 3e-4, 1 + 4e-4)
"""ludic-train's GSPO band ``[1 − 3e-4, 1 + 4e-4]``, as Tinker ``gspo`` thresholds."""


class MetricsLog:
    """One JSON line per step or eval, plus a short console line."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self._file = path.open("a", encoding="utf-8")

    def log(self, step: int, metrics: dict[str, float]) -> None:
        self._file.write(json.dumps({"step": step, **metrics}, sort_keys=True) + "\n")
        self._file.flush()
        shown = {k: round(v, 4) for k, v in sorted(metrics.items()) if k.startswith(("train/loss", "eval/"))}
        print(f"step {step}: {shown}", flush=True)

    def close(self) -> None:
        self._file.close()
