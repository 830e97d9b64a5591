"""Tokenizer-like callables for tests: real token ids without a model download."""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence

__all__ = ["ByteTokenizer", "Encode"]

Encode = Callable[[str], Sequence[int]]
"""Any ``text -> token ids`` callable (for an HF tokenizer: ``lambda s: tok.encode(s, add_special_tokens=False)``)."""


_MAX_UTF8_BYTE = 0xF4  # the largest byte value a UTF-8 encoding contains


@functools.cache
def _shift_table(offset: int) -> bytes:
    """The ``bytes.translate`` table adding ``offset`` (built once per offset, not per tokenizer)."""
    return bytes((b + offset) % 256 for b in range(256))


@functools.cache
def _unshift_table(offset: int) -> bytes:
    """The ``bytes.translate`` table subtracting ``offset`` (the inverse of :func:`_shift_table`)."""
    return bytes((b - offset) % 256 for b in range(256))


_SPECIAL_IDS = bytes(range(256))  # its first ``offset`` bytes: the ids decode drops


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
        # UTF-8 never produces the bytes 0xF5-0xFF, so for offsets up to 11 every byte it does produce
        # shifts to an id that still fits in a byte: one bytes.translate then list() (both in C) give
        # the ids. Larger offsets take the per-byte loop.
        self._shift: bytes | None = _shift_table(offset) if offset + _MAX_UTF8_BYTE <= 255 else None

    def encode(self, text: str) -> list[int]:
        data = text.encode("utf-8")
        if self._shift is not None:
            return list(data.translate(self._shift))
        return [b + self.offset for b in data]

    def decode(self, ids: Sequence[int]) -> str:
        if self._shift is not None:
            # Every id fits in a byte (else bytes() refuses and the loop below runs): one translate
            # shifts them back and deletes the special ids below the offset, in C.
            try:
                data = bytes(ids)
            except ValueError:
                pass
            else:
                return data.translate(_unshift_table(self.offset), _SPECIAL_IDS[: self.offset]).decode(
                    "utf-8", errors="replace"
                )
        data = bytes(i - self.offset for i in ids if i >= self.offset)
        return data.decode("utf-8", errors="replace")

    def __call__(self, text: str) -> list[int]:
        return self.encode(text)
