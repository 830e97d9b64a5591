"""Test helpers: a tiny Llama that vLLM's CPU backend can serve, built from a config with no hub access.

The tokenizer is a real ``tokenizers`` character-level WordLevel model (``<unk>``=0, ``<s>``=1,
``</s>``=2, then printable ASCII 32–126 as ids 3–97, so ``id = ord(c) - 29``). The model is a random
2-layer ``LlamaForCausalLM`` with head_dim 64 (vLLM's CPU attention rejects smaller head sizes), saved as
safetensors with the tokenizer in one directory. Needs ``torch``, ``transformers`` and ``tokenizers``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

__all__ = [
    "CHAR_VOCAB_SIZE",
    "build_tiny_llama",
    "char_ids",
    "hf_greedy",
    "hf_token_logprobs",
    "load_hf_model",
    "load_state_into",
    "perturbed",
    "state_dict_copy",
]

CHAR_VOCAB_SIZE = 98


def char_ids(text: str) -> list[int]:
    """Token ids of ``text`` under the character tokenizer (printable ASCII only)."""
    out = []
    for ch in text:
        code = ord(ch)
        if not 32 <= code <= 126:
            raise ValueError(f"character {ch!r} is not printable ASCII")
        out.append(code - 29)
    return out


def _tokenizer() -> Any:
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
    for code in range(32, 127):
        vocab[chr(code)] = code - 29
    tk = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tk.pre_tokenizer = pre_tokenizers.Split(Regex(""), behavior="isolated")
    tk.decoder = decoders.Fuse()
    return PreTrainedTokenizerFast(
        tokenizer_object=tk, unk_token="<unk>", bos_token="<s>", eos_token="</s>", model_max_length=512
    )


def build_tiny_llama(out_dir: str | Path, *, seed: int = 0, max_position_embeddings: int = 512) -> Path:
    """Build and save the tiny model + tokenizer; returns the directory."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    config = LlamaConfig(
        vocab_size=CHAR_VOCAB_SIZE,
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=max_position_embeddings,
        bos_token_id=1,
        eos_token_id=2,
        tie_word_embeddings=False,
    )
    gen = torch.Generator().manual_seed(seed)
    model = LlamaForCausalLM(config)
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() > 1:
                p.copy_(torch.randn(p.shape, generator=gen) * 0.05)
    model.save_pretrained(out, safe_serialization=True)
    _tokenizer().save_pretrained(out)
    return out


def load_hf_model(path: str | Path) -> Any:
    """Load the saved model in fp32 eval mode with transformers (the reference for vLLM outputs)."""
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(path), dtype=torch.float32)
    model.eval()
    return model


def state_dict_copy(model: Any) -> dict[str, Any]:
    """A detached copy of the model's weights in checkpoint names (what a trainer would publish)."""
    return {name: t.detach().clone() for name, t in model.state_dict().items()}


def perturbed(state: dict[str, Any], *, seed: int, scale: float = 0.05) -> dict[str, Any]:
    """Weights plus seeded Gaussian noise on every matrix (a stand-in for a training step)."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    return {
        name: (t + scale * torch.randn(t.shape, generator=gen, dtype=t.dtype)) if t.dim() > 1 else t.clone()
        for name, t in state.items()
    }


def hf_greedy(model: Any, prompt_ids: list[int], max_tokens: int) -> list[int]:
    """Greedy continuation computed with transformers (full forward each step: exact, tiny model)."""
    import torch

    ids = list(prompt_ids)
    with torch.no_grad():
        for _ in range(max_tokens):
            logits = model(torch.tensor([ids])).logits[0, -1]
            ids.append(int(torch.argmax(logits)))
    return ids[len(prompt_ids) :]


def hf_token_logprobs(
    model: Any, prompt_ids: list[int], completion_ids: list[int], temperature: float
) -> list[float]:
    """Logprob of each completion token under ``softmax(logits / temperature)`` (vLLM's processed
    logprobs), computed with transformers."""
    import torch

    ids = torch.tensor([list(prompt_ids) + list(completion_ids)])
    with torch.no_grad():
        logits = model(ids).logits[0].float()
    start = len(prompt_ids) - 1
    steps = logits[start : start + len(completion_ids)] / temperature
    logps = torch.log_softmax(steps, dim=-1)
    return [float(logps[i, tok]) for i, tok in enumerate(completion_ids)]


def load_state_into(model: Any, state: dict[str, Any]) -> Any:
    """Load ``state`` into ``model`` (strict) and return it."""
    model.load_state_dict(state, strict=True)
    return model
