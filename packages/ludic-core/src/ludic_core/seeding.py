"""Deterministic seed derivation.

Ludic never touches global RNG state. Where one seed must fan out into many (a seed per agent, per
turn, per model call), :func:`derive_seed` hashes the parts so that the children are independent of
each other, stable across processes and Python versions (unlike ``hash()``), and fit in 31 bits, which
every backend (vLLM, Tinker, torch) accepts.
"""

from __future__ import annotations

import hashlib

__all__ = ["MAX_SEED", "derive_seed"]

MAX_SEED = 2**31 - 1


def derive_seed(base: int, *parts: object) -> int:
    """Return a seed in ``[0, MAX_SEED]`` determined by ``base`` and ``parts`` (by their ``repr``)."""
    if isinstance(base, bool) or not isinstance(base, int):
        raise TypeError(f"derive_seed: base must be an int, got {base!r}")
    text = "\x1f".join([str(base), *(repr(p) for p in parts)])
    digest = hashlib.blake2b(text.encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "big") % (MAX_SEED + 1)
