"""Byte tokenizer: UTF-8 round trips, BOS on request, specials dropped on the way back."""

from __future__ import annotations

import pytest
from hypothesis import given, strategies as st

from model_stub import tokenizer
from model_stub.config import BOS_ID, EOS_ID, PAD_ID, VOCAB_SIZE


@pytest.mark.parametrize(
    "text",
    [
        "", "hello", "Prefill-as-a-Service", "naïve café", "Größe ß", "日本語のテキスト",
        "emoji 🚀🧪", "tab\tnew\nline\0nul", "mixed: α+β=γ, 𝔘𝔫𝔦𝔠𝔬𝔡𝔢",
    ],
)
def test_text_round_trips(text):
    ids = tokenizer.encode(text)
    assert ids[0] == BOS_ID
    assert ids[1:] == list(text.encode("utf-8"))
    assert tokenizer.decode(ids) == text
    assert tokenizer.decode(tokenizer.encode(text, bos=False)) == text


@given(st.text())
def test_any_text_round_trips(text):
    ids = tokenizer.encode(text)
    assert all(0 <= i < VOCAB_SIZE for i in ids)
    assert tokenizer.decode(ids) == text


def test_bos_is_prepended_only_when_asked():
    assert tokenizer.encode("ab") == [BOS_ID, 97, 98]
    assert tokenizer.encode("ab", bos=False) == [97, 98]
    assert tokenizer.encode("") == [BOS_ID]
    assert tokenizer.encode("é", bos=False) == [0xC3, 0xA9]  # two UTF-8 bytes, two tokens


def test_special_ids_are_dropped_on_decode():
    ids = [BOS_ID, 104, PAD_ID, 105, EOS_ID, PAD_ID]
    assert tokenizer.decode(ids) == "hi"
    assert tokenizer.decode([BOS_ID, EOS_ID, PAD_ID]) == ""
    # a special between the bytes of one character does not break it
    assert tokenizer.decode([0xC3, PAD_ID, 0xA9]) == "é"


def test_broken_utf8_is_replaced_not_raised():
    assert tokenizer.decode([0xFF, 104]) == "\ufffdh"
    assert tokenizer.decode(tokenizer.encode("é", bos=False)[:1]) == "\ufffd"
