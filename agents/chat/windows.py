"""How many tokens a model's context window holds, for the chat's meter.

What the admin configured wins (``configured``: the model's row of its provider, else the
provider's own setting; ``Provider.settings_for``); then a small table of known model families,
matched by the longest prefix of the model name (a provider prefix such as ``openai/`` or
``anthropic/`` is ignored). Unknown models get ``DEFAULT_CONTEXT_WINDOW``.
"""

from __future__ import annotations

DEFAULT_CONTEXT_WINDOW = 32_768

# (model name prefix, tokens). Longest matching prefix wins.
KNOWN_WINDOWS: tuple[tuple[str, int], ...] = (
    ("gpt-5", 400_000),
    ("gpt-4.1", 1_047_576),
    ("gpt-4o", 128_000),
    ("gpt-4-turbo", 128_000),
    ("gpt-4", 8_192),
    ("gpt-3.5-turbo", 16_385),
    ("o1-mini", 128_000),
    ("o1", 200_000),
    ("o3", 200_000),
    ("o4", 200_000),
    ("claude", 200_000),
    ("gemini", 1_048_576),
    ("llama-3", 128_000),
    ("llama3", 128_000),
    ("mistral-large", 128_000),
    ("mistral", 32_768),
    ("mixtral", 32_768),
    ("qwen", 32_768),
    ("deepseek", 128_000),
    ("phi-3", 128_000),
    ("gemma", 8_192),
    ("demo", 8_192),
)


def context_window(model: str, configured: int | None = None) -> int:
    """The context window of ``model``: the configured value, else the table's."""
    if configured is not None and configured > 0:
        return configured
    name = (model or "").strip().lower()
    bare = name.rsplit("/", 1)[-1]
    best = 0
    tokens = DEFAULT_CONTEXT_WINDOW
    for prefix, size in KNOWN_WINDOWS:
        if bare.startswith(prefix) and len(prefix) > best:
            best, tokens = len(prefix), size
    return tokens
