from __future__ import annotations

import pytest

from agents.runtime.providers import PROVIDER_CLASSES, build_provider, get_provider_class
from agents.runtime.providers.anthropic import AnthropicProvider
from agents.runtime.providers.demo import DemoProvider
from agents.runtime.providers.openai import OpenAIProvider


def test_the_registry_names_three_kinds():
    assert PROVIDER_CLASSES == {"openai": OpenAIProvider, "anthropic": AnthropicProvider,
                                "demo": DemoProvider}
    assert get_provider_class("anthropic") is AnthropicProvider


def test_build_provider_passes_options_and_drops_the_ones_a_kind_does_not_take():
    local = build_provider("openai", base_url="http://localhost:11434/v1", api_key="",
                           name="ollama", capabilities={"vision": True})
    demo = build_provider("demo", base_url="", api_key="secret", token_delay_s=0.01)

    assert isinstance(local, OpenAIProvider)
    assert local.url == "http://localhost:11434/v1/chat/completions"
    assert local.name == "ollama" and local.capabilities.vision
    assert isinstance(demo, DemoProvider) and demo.token_delay_s == 0.01


def test_an_empty_base_url_falls_back_to_the_default():
    assert build_provider("openai", base_url="", api_key="k").base_url == "https://api.openai.com/v1"


def test_an_unknown_kind_is_a_clear_error():
    with pytest.raises(ValueError, match="Unknown provider kind 'gemini'; known kinds: anthropic, demo, openai"):
        build_provider("gemini")
