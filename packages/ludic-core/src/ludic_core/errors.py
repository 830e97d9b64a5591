"""One exception hierarchy for every Ludic package.

Catch :class:`LudicError` to handle anything Ludic raises on purpose. The subclasses say which layer
complained, so a caller can tell a bad config (fix your code) from a transport failure (retry later).
"""

from __future__ import annotations

__all__ = [
    "ConfigError",
    "ConformanceError",
    "DataError",
    "EpisodeError",
    "LudicError",
    "LudicTimeoutError",
    "MissingExtraError",
    "ProtocolError",
    "RegistryError",
    "TransportError",
]


class LudicError(Exception):
    """Root of every error Ludic raises deliberately."""


class ConfigError(LudicError, ValueError):
    """A value given by the user is invalid (names the field and the value)."""


class RegistryError(ConfigError, KeyError):
    """An env, protocol or agent name is unknown or registered twice."""

    def __str__(self) -> str:  # KeyError quotes its message; keep it readable.
        return str(self.args[0]) if self.args else ""


class MissingExtraError(LudicError, ImportError):
    """An optional dependency is not installed; the message names the extra to install."""


class ProtocolError(LudicError):
    """An env, agent or client broke the interaction contract (e.g. wrong agent ids)."""


class DataError(LudicError, ValueError):
    """Data does not satisfy an invariant (token lengths, non-extending prompts, bad JSON)."""


class UnbuildableRolloutError(DataError):
    """One rollout's steps make no training item (a prompt that does not extend its turn, a turn with
    two env steps, calls of one turn at different temperatures). Batch builders drop that rollout, and
    the rest of its group, and count it; the other rollouts still train."""

    def __init__(self, rollout_id: str, reason: str) -> None:
        super().__init__(reason)
        self.rollout_id = rollout_id
        self.reason = reason


class TransportError(LudicError):
    """A remote component (inference server, queue, service) failed or could not be reached."""


class LudicTimeoutError(LudicError, TimeoutError):
    """Something waited longer than its timeout; the message says what it waited for."""


class EpisodeError(LudicError):
    """An episode failed; raised when a failure policy says the batch must fail."""


class ConformanceError(LudicError, AssertionError):
    """A third-party env or client does not satisfy the Ludic contract (``ludic_core.testing``)."""


def missing_extra(package: str, extra: str, module: str) -> MissingExtraError:
    """Build the error for a lazily imported optional dependency."""
    return MissingExtraError(
        f'{module!r} is required for this feature; install it with: pip install "{package}[{extra}]"'
    )
