"""Byte-level tokens: any text is UTF-8 bytes 0-255, plus BOS/EOS/PAD ids above them."""

from __future__ import annotations

from collections.abc import Iterable

from model_stub.config import BOS_ID, BYTE_VOCAB


def encode(text: str, bos: bool = True) -> list[int]:
    return ([BOS_ID] if bos else []) + list(text.encode("utf-8"))


def decode(ids: Iterable[int]) -> str:
    """Bytes back to text; special ids are dropped and broken UTF-8 is replaced, never raised."""
    return bytes(i for i in ids if 0 <= i < BYTE_VOCAB).decode("utf-8", errors="replace")
