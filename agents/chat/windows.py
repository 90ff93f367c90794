"""How many tokens a model's context window holds, for the chat's meter.

A small table of known model families, matched by the longest prefix of the model name (a
provider prefix such as ``openai/`` or ``anthropic/`` is ignored). A provider can say better in
its capabilities (admin, Provider → Capabilities), either for every model it serves or per model:

    {"context_window": 131072}
    {"context_window": {"llama3.1:8b": 131072, "*": 8192}}

Unknown models get ``DEFAULT_CONTEXT_WINDOW``.
"""

from __future__ import annotations

from typing import Any

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


def _positive_int(value: Any) -> int | None:
    try:
        number = int(value)
    except (TypeError, ValueError):
        return None
    return number if number > 0 else None


def context_window(model: str, capabilities: dict[str, Any] | None = None) -> int:
    """The context window of ``model``: the provider's configured value, else the table's."""
    name = (model or "").strip().lower()
    configured = (capabilities or {}).get("context_window") if isinstance(capabilities, dict) else None
    if isinstance(configured, dict):
        lowered = {str(k).lower(): v for k, v in configured.items()}
        found = _positive_int(lowered.get(name)) or _positive_int(lowered.get("*"))
        if found:
            return found
    elif configured is not None and _positive_int(configured):
        return _positive_int(configured) or DEFAULT_CONTEXT_WINDOW
    bare = name.rsplit("/", 1)[-1]
    best = 0
    tokens = DEFAULT_CONTEXT_WINDOW
    for prefix, size in KNOWN_WINDOWS:
        if bare.startswith(prefix) and len(prefix) > best:
            best, tokens = len(prefix), size
    return tokens
