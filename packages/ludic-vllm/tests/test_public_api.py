"""ludic_vllm's root exports the client side: every name resolves, lazily, without the server pieces."""

from __future__ import annotations

from ludic_core.testing.public_api import check_public_api

# The server extension (vLLM and the web stack it runs on) and the publisher extra (torch, safetensors).
SERVER_AND_EXTRAS = ("vllm", "fastapi", "uvicorn", "torch", "safetensors", "transformers")
SERVER_MODULES = ("ludic_vllm.routes", "ludic_vllm.serve", "ludic_vllm.worker")


def test_the_root_keeps_its_promises() -> None:
    check_public_api(
        "ludic_vllm",
        not_on_import=(*SERVER_AND_EXTRAS, "aiohttp"),
        not_on_resolve=(*SERVER_AND_EXTRAS, *SERVER_MODULES),
    )
