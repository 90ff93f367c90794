"""The admin form for agents.

It limits every choice (provider, tools, fallback providers) to the agent's team, so another
team's objects cannot be linked even by posting their ids."""

from __future__ import annotations

from typing import Any

from django import forms
from django.core.exceptions import ValidationError

from agents.models import Agent, Provider, Tool
from agentsite.models import Team

from .tool_policies import (
    ToolPolicyTable,
    policy_label,
    policy_overrides,
    policy_problems,
    posted_policies,
    role_floor_text,
)


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
            "max_output_tokens", "allowed_models", "allow_request_params", "system_prompt", "tools", "tool_dispatcher",
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
