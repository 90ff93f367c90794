"""Admin forms for providers and agents.

The provider form keeps the API key write-only: a password input that never renders a value,
with a checkbox to remove the stored key. The agent form limits every choice (provider, tools,
fallback providers) to the agent's team, so another team's objects cannot be linked even by
posting their ids."""

from __future__ import annotations

import inspect
import re
from typing import Any

from django import forms
from django.core.exceptions import ValidationError

from agents.models import Agent, Provider, ProviderModel, Tool
from agents.runtime.providers import build_provider, get_provider_class
from agentsite.crypto import SecretUnreadable, decrypt
from agentsite.models import Team
from agentsite.outbound import base_url_problem

from .tool_policies import (
    ToolPolicyTable,
    policy_label,
    policy_overrides,
    policy_problems,
    posted_policies,
    role_floor_text,
)

# -- providers ------------------------------------------------------------------------------------
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


# -- agents ---------------------------------------------------------------------------------------
class LinesField(forms.CharField):
    """A list of strings edited as one per line (blank lines and repeats dropped)."""

    widget = forms.Textarea(attrs={"rows": 3})

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("required", False)
        super().__init__(strip=False, **kwargs)

    def prepare_value(self, value: Any) -> Any:
        if isinstance(value, list):
            return "\n".join(str(v) for v in value)
        return value

    def to_python(self, value: Any) -> list[str]:
        if isinstance(value, list):
            return [str(v) for v in value]
        seen: list[str] = []
        for line in str(value or "").splitlines():
            line = line.strip()
            if line and line not in seen:
                seen.append(line)
        return seen


class FallbacksField(forms.CharField):
    """Ordered fallbacks edited as “provider name / model”, one per line; a line with only the
    provider name falls back to that provider with the agent's own model. ``provider_names``
    (the team's providers) is set by the form."""

    widget = forms.Textarea(attrs={"rows": 3})
    separator = " / "

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("required", False)
        super().__init__(strip=False, **kwargs)
        self.provider_names: list[str] = []

    def prepare_value(self, value: Any) -> Any:
        if isinstance(value, list):
            lines = []
            for entry in value:
                if isinstance(entry, dict):
                    model = entry.get("model") or ""
                    lines.append(f"{entry.get('provider', '')}{self.separator}{model}" if model
                                 else str(entry.get("provider", "")))
            return "\n".join(lines)
        return value

    def to_python(self, value: Any) -> list[dict[str, str]]:
        if isinstance(value, list):
            return value
        entries: list[dict[str, str]] = []
        # Longest names first, so "Local / fast" is not read as provider "Local" when a
        # provider is literally called "Local / fast".
        names = sorted(self.provider_names, key=len, reverse=True)
        for number, raw in enumerate(str(value or "").splitlines(), start=1):
            line = raw.strip()
            if not line:
                continue
            entry = self._parse_line(line, names)
            if entry is None:
                known = ", ".join(f"“{n}”" for n in sorted(self.provider_names)) or "none yet"
                raise ValidationError(
                    f"Line {number} (“{line}”) does not start with the name of one of the team's "
                    f"providers. Write “provider name / model”. Providers: {known}.")
            entries.append(entry)
        return entries

    def _parse_line(self, line: str, names: list[str]) -> dict[str, str] | None:
        for name in names:
            if not line.startswith(name):
                continue
            rest = line[len(name):].strip()
            if not rest:
                return {"provider": name, "model": ""}
            if rest.startswith("/"):
                return {"provider": name, "model": rest[1:].strip()}
        return None


AGENT_HELP = {
    "name": "How people find the agent in the chat; unique in the team.",
    "description": "Shown to people choosing an agent in the chat.",
    "provider": "Where the model runs. Only the team's providers can be chosen.",
    "model": "The model name the provider knows, e.g. gpt-4o-mini or claude-sonnet-4-5. The demo "
             "model answers to any name.",
    "temperature": "0 to 2. Empty: the provider's default. Lower is more deterministic.",
    "max_output_tokens": "Longest answer per model request. Empty: the provider's setting for "
                         "the model, else the server's default.",
    "system_prompt": "The instructions every turn starts with.",
    "tools": "What the agent may call. Only the team's tools are listed; disabled tools are "
             "left out of turns. Beside each tool: whether it runs (allow), waits for a person "
             "to approve each call (ask a person) or never runs (deny) for this agent; the team "
             "default is the tool's own setting in the Tools list. A policy is kept only for "
             "the tools the agent uses. Below a tool's role floor every call is denied, and "
             "tools that ask a person never run for a viewer's turn.",
    "max_tool_iterations": "How many model ↔ tool rounds one turn may take (1 to 100).",
    "parallel_tools": "Run several tool calls of one answer at the same time.",
    "tool_dispatcher": "How tools are offered: native tool calls, tags in the prompt, or the "
                       "best the model supports.",
    "history_max_messages": "How many earlier messages each turn sends at most.",
    "compaction_enabled": "Summarise older messages when the conversation grows long.",
    "compaction_threshold_tokens": "Compact once the estimated history exceeds this many tokens.",
    "compaction_preserve_recent": "Recent messages always kept word for word.",
    "trajectory_states": "Record a state (goal, progress, next step) after each iteration, shown "
                         "in the trace.",
    "memory_auto_save": "Store what people tell the agent as memories automatically.",
    "memory_recall_limit": "How many memories each turn recalls at most.",
    "memory_min_relevance": "Memories less relevant than this (0 to 1) are not recalled.",
    "approval_timeout_s": "How long a tool call that needs approval waits before it is denied.",
    "step_timeout_s": "Longest wait for one model request.",
    "turn_time_limit_s": "A turn that runs longer is stopped cleanly (5 to 3600 seconds).",
    "max_tokens_per_turn": "Stop a turn before the next model request once it used this many "
                           "tokens. Empty: no limit.",
    "max_cost_per_turn": "Stop a turn before the next model request once it cost this much (USD). "
                         "Empty: no limit.",
}
AGENT_LABELS = {
    "approval_timeout_s": "Approval timeout (seconds)",
    "step_timeout_s": "Step timeout (seconds)",
    "turn_time_limit_s": "Turn time limit (seconds)",
    "max_cost_per_turn": "Max cost per turn (USD)",
    "history_max_messages": "History cap (messages)",
    "inject_trajectory_state": "Send the state to the model",
    "memory_min_relevance": "Minimum relevance",
    "memory_recall_limit": "Recall limit",
    "memory_auto_save": "Auto-save memories",
    "tool_dispatcher": "Dispatcher",
}


class AgentAdminForm(forms.ModelForm):
    """``team`` is set on the class by the admin (the team chosen for a new agent, or the
    agent's own team); every choice is limited to it."""

    team: Team | None = None

    fallbacks = FallbacksField(
        label="Fallbacks",
        help_text="Tried in order when the model fails: one “provider name / model” per line, e.g. "
                  "“OpenAI / gpt-4o-mini”. Only the provider name: same model, other provider.")
    suggested_prompts = LinesField(
        label="Suggested prompts",
        help_text="One per line, at most 6: shown as starters on a new conversation with this "
                  "agent (a click sends it).")
    allowed_models = LinesField(
        label="Models /model may switch to",
        help_text="One model name per line. People can pick one of these for a conversation with "
                  "/model. Empty: /model is off.")
    memory_min_relevance = forms.FloatField(min_value=0, max_value=1, initial=0.4)

    class Meta:
        model = Agent
        fields = [
            "team", "name", "slug", "description", "suggested_prompts", "provider", "model", "fallbacks", "temperature",
            "max_output_tokens", "allowed_models", "system_prompt", "tools", "tool_dispatcher",
            "parallel_tools", "max_tool_iterations", "approval_timeout_s", "history_max_messages",
            "compaction_enabled", "compaction_threshold_tokens", "compaction_preserve_recent",
            "trajectory_states", "inject_trajectory_state", "memory_auto_save",
            "memory_recall_limit", "memory_min_relevance", "step_timeout_s", "turn_time_limit_s",
            "max_tokens_per_turn", "max_cost_per_turn", "interrupt_on_new_message",
        ]
        widgets = {
            "tools": ToolPolicyTable,
            "system_prompt": forms.Textarea(attrs={"rows": 12}),
            "description": forms.Textarea(attrs={"rows": 2}),
        }
        labels = AGENT_LABELS
        help_texts = AGENT_HELP

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        team = self.team or (self.instance.team if self.instance.team_id else None)
        self.agent_team = team
        team_id = team.pk if team else None
        if "team" in self.fields:
            field = self.fields["team"]
            field.queryset = Team.objects.filter(pk=team_id)
            field.initial = team_id
            field.disabled = True
            field.help_text = "An agent stays in its team; its providers and tools come from it."
        if "provider" in self.fields:
            self.fields["provider"].queryset = Provider.objects.filter(team_id=team_id).order_by("name")
        if "tools" in self.fields:
            tools = self.fields["tools"]
            # The admin wraps the widget to add an "add another" link, which cannot add a row
            # to this table; the table is the widget.
            tools.widget = getattr(tools.widget, "widget", tools.widget)
            tools.queryset = Tool.objects.filter(team_id=team_id).order_by("name")
            tools.label_from_instance = _tool_label
            # What each tool's policy choice shows: as posted, or the agent's stored overrides.
            tools.widget.choices_by_name = (
                posted_policies(self.data, self.prefix or "") if self.is_bound
                else dict(self.instance.tool_policies or {}))
        names = list(Provider.objects.filter(team_id=team_id).values_list("name", flat=True))
        self.fields["fallbacks"].provider_names = names
        self.fields["memory_min_relevance"].help_text = AGENT_HELP["memory_min_relevance"]
        self.fields["memory_min_relevance"].label = AGENT_LABELS["memory_min_relevance"]

    def clean_suggested_prompts(self) -> list[str]:
        prompts = self.cleaned_data.get("suggested_prompts") or []
        if len(prompts) > 6:
            raise forms.ValidationError(f"At most 6 suggested prompts ({len(prompts)} given).")
        long = [p for p in prompts if len(p) > 500]
        if long:
            raise forms.ValidationError("A suggested prompt is at most 500 characters.")
        return prompts

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        step, turn = data.get("step_timeout_s"), data.get("turn_time_limit_s")
        if step is not None and step < 1:
            self.add_error("step_timeout_s", "Give the model at least 1 second per request.")
        if step and turn and step > turn:
            self.add_error("step_timeout_s", "The step timeout cannot be longer than the turn time "
                                             "limit: the turn would end first.")
        if data.get("approval_timeout_s") == 0:
            self.add_error("approval_timeout_s", "Wait at least 1 second for an approval.")
        if data.get("inject_trajectory_state") and not data.get("trajectory_states", True):
            self.add_error("inject_trajectory_state",
                           "Turn trajectory states on to send them to the model.")
        cost = data.get("max_cost_per_turn")
        if cost is not None and cost <= 0:
            self.add_error("max_cost_per_turn", "Enter an amount above 0, or leave it empty for no limit.")
        self._clean_tool_policies(data)
        return data

    def _clean_tool_policies(self, data: dict[str, Any]) -> None:
        """The agent's own policy per chosen tool (only those that differ from the team's),
        onto the instance: ``agent_save`` keeps it in the version and the audit row."""
        if "tools" not in self.fields:
            return
        choices = posted_policies(self.data, self.prefix or "")
        names = self.fields["tools"].queryset.values_list("name", flat=True)
        problems = policy_problems(choices, names)
        if problems:
            self.add_error("tools", problems)
            return
        chosen = data.get("tools")
        if chosen is None:
            return  # the tools were refused already
        self.instance.tool_policies = policy_overrides(choices, chosen)


def _tool_label(tool: Tool) -> str:
    notes = [tool.get_kind_display(), f"team default: {policy_label(tool.policy).lower()}",
             role_floor_text(tool.min_role).lower()]
    if not tool.enabled:
        notes.append("disabled")
    return f"{tool.name} ({', '.join(notes)})"
