"""ludic_tinker's root exports the public API: every name resolves, lazily; importing it loads no SDK."""

from __future__ import annotations

from ludic_core.testing.public_api import check_public_api


def test_the_root_keeps_its_promises() -> None:
    check_public_api("ludic_tinker", not_on_import=("tinker", "torch"))
