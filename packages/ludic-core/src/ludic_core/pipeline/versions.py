"""Reading the sampler's policy version: retried with backoff, bounded, never guessed.

The original library returned version 0 when the read failed, which silently mislabelled data for
staleness control. Here a transient failure (transport error, timeout) is retried with exponential
backoff until ``deadline_s``; then the actor stops with an error that says what it tried. A
configuration error (a client that has no version at all) or a nonsense value fails at once.
"""

from __future__ import annotations

import asyncio
import time

from ludic_core.errors import ConfigError, LudicTimeoutError, ProtocolError, TransportError
from ludic_core.inference import VersionedClient
from ludic_core.logs import get_logger
from ludic_core.validation import check_int, check_number

__all__ = ["read_policy_version"]

log = get_logger(__name__)

_TRANSIENT = (TransportError, LudicTimeoutError, TimeoutError, ConnectionError, OSError)


async def read_policy_version(
    client: VersionedClient,
    *,
    attempt_timeout_s: float,
    deadline_s: float,
    initial_backoff_s: float = 0.1,
    max_backoff_s: float = 5.0,
) -> int:
    """``await client.get_policy_version()`` with a per-attempt timeout, retried until ``deadline_s``.

    Raises :class:`TransportError` once the deadline has passed (naming the client, the attempts and
    the last error), :class:`ProtocolError` for a value that is not an int >= 0, and re-raises
    non-transient errors (e.g. :class:`ConfigError`) immediately.
    """
    for name, value in (("attempt_timeout_s", attempt_timeout_s), ("deadline_s", deadline_s)):
        check_number(f"read_policy_version: {name}", value, minimum=0, exclusive=True)
    getter = getattr(client, "get_policy_version", None)
    if not callable(getter):
        raise ConfigError(
            f"{type(client).__name__} has no get_policy_version(); pass a VersionedClient or client=None"
        )
    started = time.monotonic()
    backoff = initial_backoff_s
    attempts = 0
    while True:
        attempts += 1
        remaining = deadline_s - (time.monotonic() - started)
        try:
            version = await asyncio.wait_for(getter(), min(attempt_timeout_s, max(remaining, 1e-3)))
        except _TRANSIENT as exc:
            last = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
            elapsed = time.monotonic() - started
            if elapsed + backoff > deadline_s:
                raise TransportError(
                    f"could not read the policy version from {type(client).__name__} within "
                    f"{deadline_s} s ({attempts} attempts, each bounded by {attempt_timeout_s} s); "
                    f"last error: {last}. Refusing to guess a version: stale data would be mislabelled"
                ) from exc
            log.warning(
                "pipeline.policy_version_retry", client=type(client).__name__, attempt=attempts, error=last
            )
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, max_backoff_s)
            continue
        check_int(f"{type(client).__name__}.get_policy_version()", version, 0, error=ProtocolError)
        return version
