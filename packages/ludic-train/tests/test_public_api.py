"""ludic_train's root exports the public API: every name resolves, lazily, without optional dependencies."""

from __future__ import annotations

from ludic_core.testing.public_api import check_public_api

# The extras (lora, wandb, redis, plot): only the features that need them import them.
OPTIONAL = ("peft", "wandb", "redis", "matplotlib")


def test_the_root_keeps_its_promises() -> None:
    check_public_api(
        "ludic_train", not_on_import=(*OPTIONAL, "torch", "transformers"), not_on_resolve=OPTIONAL
    )
