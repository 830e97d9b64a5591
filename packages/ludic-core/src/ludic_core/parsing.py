"""The parser contract: raw model text in, an env action (or a failure with feedback) out.

Parsers carry *intrinsic format rewards*: a parser may reward a well-formed output and penalise a
malformed one. The protocol decides where the reward lands (see ``ludic_core.protocols``).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TypeAlias

import attrs

from ludic_core.errors import DataError

__all__ = ["ParseResult", "Parser"]


@attrs.frozen
class ParseResult:
    """``action=None`` means the output failed to parse; ``obs`` is the feedback the model sees next."""

    action: str | None
    reward: float = attrs.field(default=0.0, converter=float)
    obs: str | None = None

    def __attrs_post_init__(self) -> None:
        if not math.isfinite(self.reward):
            raise DataError(f"ParseResult.reward must be finite, got {self.reward!r}")

    @property
    def ok(self) -> bool:
        return self.action is not None


Parser: TypeAlias = Callable[[str], ParseResult]
