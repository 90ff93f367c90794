"""The agent's own policy per tool, as the agent admin edits it.

The tools of the agent are chosen in one table: a checkbox per tool of the team, beside it a
choice of "Team default (<the tool's policy>)" / Allow / Ask a person / Deny, the policy that
applies and the tool's role floor. The choices are posted as ``tool_policy__<tool name>``;
``posted_policies`` reads them back, and only the choices that differ from the team default
are kept, in ``Agent.tool_policies`` ({tool name: "allow" | "ask" | "deny"})."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from django import forms
from django.template.loader import render_to_string
from django.utils.safestring import SafeString, mark_safe

from agents.models import Tool, ToolPolicy
from agentsite.models import Membership

FIELD_PREFIX = "tool_policy__"
TEAM_DEFAULT = ""
POLICY_VALUES = {choice.value for choice in ToolPolicy}


def policy_label(policy: str) -> str:
    try:
        return str(ToolPolicy(policy).label)
    except ValueError:
        return policy


def role_floor_text(role: str) -> str:
    """Who may run the tool, as a person reads it."""
    if role == Membership.Role.OWNER:
        return "Owners only"
    try:
        return f"{Membership.Role(role).label}s and up"
    except ValueError:
        return role


def policy_field_name(tool_name: str) -> str:
    return f"{FIELD_PREFIX}{tool_name}"


def posted_policies(data: Mapping[str, Any], prefix: str = "") -> dict[str, str]:
    """Every ``tool_policy__<name>`` choice in the posted data, as {name: value} (values as
    posted, "" for the team default)."""
    start = f"{prefix}-{FIELD_PREFIX}" if prefix else FIELD_PREFIX
    return {key[len(start):]: str(data.get(key) or "").strip()
            for key in data if key.startswith(start)}


def policy_problems(choices: Mapping[str, str], team_tool_names: Iterable[str]) -> list[str]:
    """Sentences for every choice that names no tool of the team or no known policy."""
    known = set(team_tool_names)
    problems = []
    unknown = sorted(name for name in choices if name not in known)
    if unknown:
        problems.append(f"{', '.join('“' + n + '”' for n in unknown)} "
                        f"{'is not a tool' if len(unknown) == 1 else 'are not tools'} of this "
                        "agent's team; a policy can only be set for the team's own tools.")
    bad = sorted(n for n, v in choices.items() if n in known and v not in POLICY_VALUES | {TEAM_DEFAULT})
    if bad:
        problems.append(f"Choose team default, allow, ask a person or deny for {', '.join(bad)}.")
    return problems


def policy_overrides(choices: Mapping[str, str], tools: Iterable[Tool]) -> dict[str, str]:
    """The agent's own policies for ``tools``: the chosen ones that differ from the team's."""
    overrides = {}
    for tool in tools:
        value = choices.get(tool.name, TEAM_DEFAULT)
        if value in POLICY_VALUES and value != tool.policy:
            overrides[tool.name] = value
    return dict(sorted(overrides.items()))


def effective_policy(tool: Tool, overrides: Mapping[str, str]) -> tuple[str, str]:
    """The policy that applies to ``tool`` for this agent, and where it comes from."""
    own = overrides.get(tool.name)
    if own in POLICY_VALUES and own != tool.policy:
        return own, "this agent"
    return tool.policy, "team default"


class ToolPolicyTable(forms.CheckboxSelectMultiple):
    """The tools field as a table: checkbox, policy choice, effective policy, role floor.

    ``choices`` (set by the form) are this agent's policy choices per tool name, the posted ones
    when the form is bound."""

    template = "admin/agents/agent/_tool_policy_table.html"

    def __init__(self, attrs: dict[str, Any] | None = None) -> None:
        super().__init__(attrs)
        self.choices_by_name: dict[str, str] = {}

    def render(self, name: str, value: Any, attrs: dict[str, Any] | None = None,
               renderer: Any = None) -> SafeString:
        context = self.get_context(name, value, attrs)
        rows = []
        for _group, options, _index in context["widget"]["optgroups"]:
            for option in options:
                tool = getattr(option["value"], "instance", None)
                if tool is not None:
                    rows.append(self._row(option, tool))
        # The template escapes every value; the result is a whole widget, hence mark_safe.
        return mark_safe(render_to_string(self.template, {"name": name, "rows": rows}))  # noqa: S308

    def _row(self, option: dict[str, Any], tool: Tool) -> dict[str, Any]:
        chosen = self.choices_by_name.get(tool.name, TEAM_DEFAULT)
        if chosen not in POLICY_VALUES or chosen == tool.policy:
            chosen = TEAM_DEFAULT
        policy, source = effective_policy(tool, {tool.name: chosen} if chosen else {})
        options = [(TEAM_DEFAULT, f"Team default ({policy_label(tool.policy).lower()})")]
        options += [(c.value, str(c.label)) for c in ToolPolicy]
        notes = [tool.get_kind_display()]
        if not tool.enabled:
            notes.append("disabled for the team")
        return {
            "tool": tool, "value": option["value"], "id": option["attrs"].get("id", ""),
            "checked": option["selected"], "notes": ", ".join(notes),
            "select_name": policy_field_name(tool.name),
            "select_id": f"id_{policy_field_name(tool.name)}",
            "options": [(v, label, v == chosen) for v, label in options],
            "effective": policy_label(policy), "effective_policy": policy, "source": source,
            "team_label": policy_label(tool.policy),
            "role_floor": role_floor_text(tool.min_role),
            "viewer_denied": policy == ToolPolicy.ASK and tool.min_role == Membership.Role.VIEWER,
        }
