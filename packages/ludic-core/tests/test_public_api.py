"""ludic_core's root exports the public API: every name resolves, lazily, with nothing heavy."""

from __future__ import annotations

from ludic_core.testing.public_api import check_public_api

HEAVY = ("torch", "transformers", "datasets")


def test_the_root_keeps_its_promises() -> None:
    check_public_api("ludic_core", not_on_import=HEAVY, not_on_resolve=HEAVY)
