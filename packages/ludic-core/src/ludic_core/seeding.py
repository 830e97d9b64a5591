"""Deterministic seed derivation.

Ludic never touches global RNG state. Where one seed must fan out into many (a seed per agent, per
turn, per model call), :func:`derive_seed` hashes the parts so that the children are independent of
each other, stable across processes and Python versions (unlike ``hash()``), and fit in 31 bits, which
every backend (vLLM, Tinker, torch) accepts.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Callable
from typing import Any

from ludic_core.errors import ConfigError
from ludic_core.validation import check_int

__all__ = ["MAX_SEED", "derive_seed", "random_state_from_json", "random_state_to_json", "seed_deriver"]

MAX_SEED = 2**31 - 1

# Seeds are the first 8 bytes of a BLAKE2b digest, reduced to 31 bits (``& MAX_SEED`` is ``% 2**31``).
# Copying this empty hasher costs less than building one with its parameters each time.
_EMPTY_HASH = hashlib.blake2b(digest_size=8)


def derive_seed(base: int, *parts: object) -> int:
    """Return a seed in ``[0, MAX_SEED]`` determined by ``base`` and ``parts`` (by their ``repr``)."""
    hasher = _EMPTY_HASH.copy()
    if type(base) is int and len(parts) == 1 and type(parts[0]) is int:
        # One int part (an agent's seed for each model call of a turn): the bytes of the text below,
        # formatted directly (repr of an int is its %d; a bool is not an int here).
        hasher.update(b"%d\x1f%d" % (base, parts[0]))
    else:
        check_int("derive_seed: base", base)
        hasher.update("\x1f".join([str(base), *map(repr, parts)]).encode("utf-8"))
    return int.from_bytes(hasher.digest(), "big") & MAX_SEED


def seed_deriver(base: int, *prefix: object) -> Callable[..., int]:
    """``derive(*rest) == derive_seed(base, *prefix, *rest)``, with ``base`` and ``prefix`` hashed once.

    For a stream of seeds that share their first parts (an episode's model calls: the same sampling
    seed and agent, a new attempt each time): the hash state after the shared parts is kept and only
    the rest is added per call, giving exactly the values :func:`derive_seed` gives.
    """
    if type(base) is not int:
        check_int("seed_deriver: base", base)
    # The shared parts as bytes, not as a hash state: a short text is one BLAKE2b block whether it is
    # hashed in one piece or two, so a head state would save nothing per call and cost a hash per
    # deriver (one per episode).
    head = "\x1f".join([str(base), *map(repr, prefix)]).encode("utf-8")

    def derive(*rest: object) -> int:
        hasher = _EMPTY_HASH.copy()
        if len(rest) == 2 and type(first := rest[0]) is int and type(second := rest[1]) is int:
            # The per-call case (attempt, round): the bytes of repr(int) without building strings.
            hasher.update(b"%b\x1f%d\x1f%d" % (head, first, second))
        elif rest:
            hasher.update(head + ("\x1f" + "\x1f".join(map(repr, rest))).encode("utf-8"))
        else:
            hasher.update(head)
        return int.from_bytes(hasher.digest(), "big") & MAX_SEED

    return derive


def random_state_to_json(rng: random.Random) -> list[Any]:
    """``rng.getstate()`` as plain JSON (lists, ints, null), so checkpoints survive ``json.dumps``."""
    version, internal, gauss = rng.getstate()
    return [version, list(internal), gauss]


def random_state_from_json(state: object, *, field: str = "rng_state") -> tuple[Any, ...]:
    """The inverse of :func:`random_state_to_json`, ready for ``random.Random.setstate``.

    Accepts the tuple that ``getstate`` returns too. ``random.setstate`` insists on tuples, and a JSON
    round trip turns them into lists, so they are rebuilt here.
    """
    if isinstance(state, (list, tuple)) and len(state) == 3:
        version, internal, gauss = state
        if (
            isinstance(version, int)
            and isinstance(internal, (list, tuple))
            and all(isinstance(x, int) and not isinstance(x, bool) for x in internal)
            and (gauss is None or isinstance(gauss, (int, float)))
        ):
            return (version, tuple(internal), gauss)
    text = repr(state)
    raise ConfigError(
        f"{field} must be [version, [int, ...], gauss] as written by state_dict(), got "
        f"{type(state).__name__}: {text if len(text) <= 80 else text[:77] + '...'}"
    )
