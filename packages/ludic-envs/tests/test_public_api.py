"""ludic_envs' root exports the public API: every name resolves, lazily, with nothing heavy."""

from __future__ import annotations

from ludic_core.testing.public_api import check_public_api

# math_verify is the `math` extra: answer checking imports it only when asked to.
HEAVY = ("torch", "transformers", "datasets", "math_verify")


def test_the_root_keeps_its_promises() -> None:
    check_public_api("ludic_envs", not_on_import=HEAVY, not_on_resolve=HEAVY)
