"""Tokenizer-like callables for tests: real token ids without a model download."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol, runtime_checkable

__all__ = ["ByteTokenizer", "Encode", "TokenizerLike"]

Encode = Callable[[str], Sequence[int]]
"""Any ``text -> token ids`` callable (for an HF tokenizer: ``lambda s: tok.encode(s, add_special_tokens=False)``)."""


@runtime_checkable
class TokenizerLike(Protocol):
    def encode(self, text: str) -> list[int]: ...

    def decode(self, ids: Sequence[int]) -> str: ...


class ByteTokenizer:
    """UTF-8 bytes shifted by ``offset`` (ids below it are free for special tokens).

    Encoding is a bijection on text, so a prompt followed by a completion always encodes to the
    prompt ids followed by the completion ids: convenient for token-exactness tests.
    """

    def __init__(self, offset: int = 3, eos_token_id: int = 2) -> None:
        if eos_token_id >= offset:
            raise ValueError(f"eos_token_id ({eos_token_id}) must be below offset ({offset})")
        self.offset = offset
        self.eos_token_id = eos_token_id
        self.vocab_size = 256 + offset

    def encode(self, text: str) -> list[int]:
        return [b + self.offset for b in text.encode("utf-8")]

    def decode(self, ids: Sequence[int]) -> str:
        data = bytes(i - self.offset for i in ids if i >= self.offset)
        return data.decode("utf-8", errors="replace")

    def __call__(self, text: str) -> list[int]:
        return self.encode(text)
