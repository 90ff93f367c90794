"""Admin forms for providers and the settings of each of their models.

The provider form keeps the API key write-only: a password input that never renders a value,
with a checkbox to remove the stored key."""

from __future__ import annotations

import inspect
import re
from typing import Any

from django import forms
from django.core.exceptions import ValidationError

from agents.models import Provider, ProviderModel
from agents.runtime.providers import build_provider, get_provider_class
from agentsite.crypto import SecretUnreadable, decrypt
from agentsite.outbound import base_url_problem

CAPABILITY_LABELS = {
    "native_tool_calling": ("Native tool calling", "The model takes tool definitions and returns "
                            "structured tool calls. Off: tools are offered in the prompt instead."),
    "vision": ("Vision", "The model reads images."),
    "prompt_caching": ("Prompt caching", "The static part of the prompt is sent with a cache marker "
                       "(Anthropic), which makes repeated turns cheaper."),
    "streaming": ("Streaming", "Answers arrive token by token."),
}
TRI_STATE = [("", "Default for the provider and model"), ("on", "On"), ("off", "Off")]
# Options the form sets from its own fields; the options JSON must not repeat them.
RESERVED_OPTIONS = {"self", "name", "base_url", "api_key", "timeout", "extra_headers",
                    "capabilities", "http_client"}
# Headers that carry credentials: they would be stored and shown in clear.
CREDENTIAL_HEADERS = {"authorization", "proxy-authorization", "x-api-key", "api-key"}
HEADER_NAME = re.compile(r"^[A-Za-z0-9!#$%&'*+.^_`|~-]+$")


def capability_field_name(name: str) -> str:
    return f"capability_{name}"


CAPABILITY_FIELDS = [capability_field_name(n) for n in CAPABILITY_LABELS]


def kind_options(kind: str) -> list[str]:
    """The options a provider kind takes beyond what the form sets."""
    try:
        cls = get_provider_class(kind)
    except ValueError:
        return []
    params = inspect.signature(cls.__init__).parameters
    return sorted(n for n, p in params.items()
                  if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and n not in RESERVED_OPTIONS)


def _capability_field(name: str) -> forms.ChoiceField:
    label, help_text = CAPABILITY_LABELS[name]
    return forms.ChoiceField(label=label, choices=TRI_STATE, required=False, help_text=help_text)


class ProviderAdminForm(forms.ModelForm):
    capability_native_tool_calling = _capability_field("native_tool_calling")
    capability_vision = _capability_field("vision")
    capability_prompt_caching = _capability_field("prompt_caching")
    capability_streaming = _capability_field("streaming")
    extra_headers = forms.JSONField(
        label="Extra headers", required=False, widget=forms.Textarea(attrs={"rows": 3}),
        help_text='Extra HTTP headers sent with every request, as a JSON object, e.g. '
                  '{"HTTP-Referer": "https://example.com"}. Values are stored encrypted and never '
                  "shown again: the names of stored headers appear with empty values; leave a "
                  "value empty to keep it, remove a name to remove the header.")
    api_key = forms.CharField(
        label="API key", required=False, strip=True,
        widget=forms.PasswordInput(render_value=False, attrs={"autocomplete": "new-password"}))
    clear_api_key = forms.BooleanField(label="Remove the stored API key", required=False)
    base_url = forms.URLField(
        label="Base URL", required=False, max_length=200, assume_scheme="https",
        help_text="Leave empty for the kind's default endpoint (api.openai.com, api.anthropic.com). "
                  "For Ollama, vLLM, LM Studio or OpenRouter, the API root, e.g. "
                  "http://localhost:11434/v1. Internal and loopback addresses are refused unless "
                  "the operator allows their network (OUTBOUND_ALLOWED_NETWORKS).")

    class Meta:
        model = Provider
        fields = ["team", "name", "kind", "base_url", "context_window", "max_output_tokens",
                  "timeout_s", "options"]
        labels = {"timeout_s": "Timeout (seconds)", "context_window": "Context window (tokens)",
                  "max_output_tokens": "Max output tokens"}
        help_texts = {
            "context_window": "How many tokens a model of this provider reads at most, prompt and "
                              "answer together; the chat's context meter uses it. Empty: the "
                              "model's own, from the catalogue. A model row below wins.",
            "max_output_tokens": "Longest answer per model request, for agents that set none. "
                                 "Empty: the server's default. A model row below wins.",
            "timeout_s": "Longest wait for one model request, 1 to 3600 seconds.",
        }

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        caps = self.instance.capabilities if isinstance(self.instance.capabilities, dict) else {}
        for name in CAPABILITY_LABELS:
            value = caps.get(name)
            if capability_field_name(name) in self.fields:
                self.initial[capability_field_name(name)] = "" if value is None else ("on" if value else "off")
        if "api_key" in self.fields:
            self.fields["api_key"].help_text = self._key_help()
        names = self.instance.extra_header_names if self.instance.pk else []
        self.initial["extra_headers"] = {str(n): "" for n in names or []}
        if "options" in self.fields:
            self.fields["options"].help_text = self._options_help()

    def _key_help(self) -> str:
        stored = self.instance.api_key_encrypted if self.instance.pk else ""
        if not stored:
            return ("No key is set. Stored encrypted and never shown again. Not needed for the "
                    "demo model or for local servers without authentication.")
        try:
            decrypt(stored)
        except SecretUnreadable:
            return ("A key is set but cannot be read with the current encryption key: enter it "
                    "again.")
        # Not even a few characters of it: a key is write-only.
        return ("A key is set. Leave empty to keep it; enter a new key to replace it. It is "
                "never shown.")

    def _options_help(self) -> str:
        lines = []
        for kind, label in Provider.Kind.choices:
            names = kind_options(kind)
            if names:
                lines.append(f"{label.split(' (')[0]}: {', '.join(names)}")
        return ('Kind-specific options as a JSON object, e.g. {"token_delay_s": 0.02} for the demo '
                "model. Known options — " + "; ".join(lines) + ".")

    def clean_base_url(self) -> str:
        value = (self.cleaned_data.get("base_url") or "").strip()
        if value:
            problem = base_url_problem(value)
            if problem:
                raise ValidationError(problem)
        return value

    def clean_extra_headers(self) -> dict[str, str]:
        value = self.cleaned_data.get("extra_headers")
        if value in (None, ""):
            return {}
        if not isinstance(value, dict):
            raise ValidationError('Enter a JSON object of header names to values, e.g. {"X-Title": "agentsite"}.')
        for name, header_value in value.items():
            if not HEADER_NAME.match(name):
                raise ValidationError(f"“{name}” is not a valid header name.")
            if not isinstance(header_value, str):
                raise ValidationError(f"The value of “{name}” must be a string (in quotes).")
            if name.lower() in CREDENTIAL_HEADERS:
                raise ValidationError(
                    f"“{name}” carries a credential the provider sets itself: enter the key in the "
                    "API key field instead, and it is sent as the provider's own authentication "
                    "header.")
            if "\n" in header_value or "\r" in header_value:
                raise ValidationError(f"The value of “{name}” must be on one line.")
        # Write-only: an empty value keeps the stored one (the form never shows values).
        stored = self._stored_headers()
        merged = {}
        for name, header_value in value.items():
            if header_value == "":
                if name not in stored:
                    raise ValidationError(f"Enter a value for “{name}”.")
                merged[name] = stored[name]
            else:
                merged[name] = header_value
        return merged

    def _stored_headers(self) -> dict[str, str]:
        if not self.instance.pk:
            return {}
        try:
            return self.instance.extra_headers()
        except SecretUnreadable:
            return {}

    def clean_options(self) -> dict[str, Any]:
        value = self.cleaned_data.get("options")
        if value in (None, ""):
            return {}
        if not isinstance(value, dict):
            raise ValidationError('Enter a JSON object, e.g. {"token_delay_s": 0.02}.')
        return value

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        if data.get("api_key") and data.get("clear_api_key"):
            self.add_error("clear_api_key", "Either enter a new key or remove the stored one, not both.")
        window, longest = data.get("context_window"), data.get("max_output_tokens")
        if window and longest and longest > window:
            self.add_error("max_output_tokens", "The longest answer cannot be longer than the "
                                                "context window, which holds it.")
        kind, options = data.get("kind"), data.get("options")
        if kind and isinstance(options, dict) and "options" not in self.errors:
            self._check_options(kind, options)
        return data

    def _check_options(self, kind: str, options: dict[str, Any]) -> None:
        known = kind_options(kind)
        unknown = sorted(k for k in options if k not in known)
        if unknown:
            label = Provider.Kind(kind).label.split(" (")[0]
            listed = ", ".join(known) or "none"
            self.add_error("options", f"Unknown option(s) for {label}: {', '.join(unknown)}. "
                                      f"Known options: {listed}.")
            return
        try:
            build_provider(kind, **options)
        except (TypeError, ValueError) as exc:
            self.add_error("options", f"These options do not work: {exc}")

    def capability_overrides(self) -> dict[str, bool]:
        chosen = {}
        for name in CAPABILITY_LABELS:
            value = self.cleaned_data.get(capability_field_name(name))
            if value in ("on", "off"):
                chosen[name] = value == "on"
        return chosen

    def save(self, commit: bool = True) -> Provider:
        # The form shows four capabilities; anything else stored beside them stays as it was.
        stored = self.instance.capabilities if isinstance(self.instance.capabilities, dict) else {}
        kept = {k: v for k, v in stored.items() if k not in CAPABILITY_LABELS}
        self.instance.capabilities = {**kept, **self.capability_overrides()}
        if "extra_headers" in self.cleaned_data:
            self.instance.set_extra_headers(self.cleaned_data["extra_headers"] or {})
        return super().save(commit=commit)


class TriStateSelect(forms.NullBooleanSelect):
    """A capability of one model: the provider's default, on or off."""

    def __init__(self, attrs: dict[str, Any] | None = None) -> None:
        super().__init__(attrs)
        self.choices = [("unknown", "Default"), ("true", "On"), ("false", "Off")]


class ProviderModelForm(forms.ModelForm):
    class Meta:
        model = ProviderModel
        fields = ["model", "context_window", "max_output_tokens", *CAPABILITY_LABELS]
        labels = {"context_window": "Context window", "max_output_tokens": "Max output tokens",
                  **{name: label for name, (label, _) in CAPABILITY_LABELS.items()}}
        widgets = {name: TriStateSelect for name in CAPABILITY_LABELS}
        error_messages = {"model": {"required": "Enter the model's name, as the agents use it."}}

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        window, longest = data.get("context_window"), data.get("max_output_tokens")
        if window and longest and longest > window:
            self.add_error("max_output_tokens", "The longest answer cannot be longer than the "
                                                "context window, which holds it.")
        return data


class ProviderModelFormSet(forms.BaseInlineFormSet):
    def clean(self) -> None:
        super().clean()
        seen: dict[str, str] = {}
        for form in self.forms:
            if not hasattr(form, "cleaned_data") or self._should_delete_form(form):
                continue
            name = (form.cleaned_data.get("model") or "").strip()
            if not name:
                continue
            if name.lower() in seen:
                raise ValidationError(f"“{name}” is listed twice (names compare without case): "
                                      "keep one row per model.")
            seen[name.lower()] = name
