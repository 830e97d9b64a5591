"""ludic_agents' root exports the public API: every name resolves, lazily, without transformers."""

from __future__ import annotations

from ludic_core.testing.public_api import check_public_api

HEAVY = ("torch", "transformers")


def test_the_root_keeps_its_promises() -> None:
    check_public_api("ludic_agents", not_on_import=HEAVY, not_on_resolve=HEAVY)
