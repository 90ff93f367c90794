"""The Tool admin form and the Try-it form.

Header values are write-only: the form never shows them (only the stored header names), an
empty field keeps what is stored, and the values go to ``Tool.headers_encrypted`` encrypted."""

from __future__ import annotations

import json
from typing import Any

from django import forms

from agents.models import Agent, ToolPolicy
from agents.models import Tool as ToolRow
from agentsite.headers import header_lines_clean, headers_field
from agentsite.models import Team

from .http import METHODS, TemplateError, UrlTemplate, template_problem
from .registry import BUILTINS
from .services import tool_header_names
from .validation import schema_problem

HEADERS_HELP = ("One header per line, as “Name: value”, e.g. “Authorization: Bearer …”. Values "
                "are stored encrypted, sent only to the tool's host and never shown again.")
EMPTY_SCHEMA = {"type": "object", "properties": {}}


class ToolAdminForm(forms.ModelForm):
    http_method = forms.ChoiceField(choices=[(m, m) for m in METHODS], initial="GET",
                                    label="HTTP method")
    headers = headers_field(HEADERS_HELP)
    clear_headers = forms.BooleanField(required=False, label="Remove the stored headers")

    class Meta:
        model = ToolRow
        fields = ["team", "name", "description", "enabled", "policy", "min_role", "idempotent",
                  "parameters", "http_method", "url_template", "timeout_s", "max_response_bytes"]
        labels = {"policy": "Policy", "min_role": "Role floor"}
        help_texts = {
            "policy": "The team's default for this tool: it runs (allow), a person approves each "
                      "call first (ask a person) or it never runs (deny). An agent may set its "
                      "own in the agent's Tools. A new tool starts with the team's default for "
                      "new tools (the team's settings).",
            "min_role": "The least team role whose turns may run this tool; for anyone below it "
                        "every call is denied. Tools that ask a person never run for a viewer's "
                        "turn.",
            "url_template": "For example https://api.example.com/weather?city={city}. Placeholders "
                            "fill the path or the query from the arguments (URL-encoded); the "
                            "scheme and host are fixed. Other arguments go to the query string "
                            "(GET, DELETE) or to a JSON body (POST, PUT, PATCH).",
            "parameters": 'The JSON schema of the arguments, e.g. {"type": "object", '
                          '"properties": {"city": {"type": "string"}}, "required": ["city"]}.',
            "timeout_s": "The longest the whole request may take, redirects included (seconds).",
            "max_response_bytes": "Reading stops past this many bytes; the model gets the start.",
            "idempotent": "Safe to run twice with the same arguments. A call that was running "
                          "when its worker stopped runs again when the turn resumes only if "
                          "this is set; otherwise the model is told it was interrupted. GET "
                          "tools only read, so they always run again.",
        }

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # Not posted (a script, an older page): the tool keeps what it has, and a new one
        # starts with its team's default.
        for name in ("policy", "min_role"):
            if name in self.fields:
                self.fields[name].required = False
        if self.is_builtin:
            for name in ("http_method", "headers", "clear_headers", "idempotent"):
                self.fields.pop(name, None)
            return
        self.fields["headers"].initial = ""  # write-only: never prefilled
        if self.instance.pk and self.instance.headers_encrypted:
            names = tool_header_names(self.instance)
            if names is None:
                stored = ("The stored headers cannot be decrypted (the encryption key changed): "
                          "enter them again.")
            else:
                stored = (f"Stored: {', '.join(names)}. Leave empty to keep them; anything "
                          "entered replaces all of them.")
            self.fields["headers"].help_text = f"{HEADERS_HELP} {stored}"
        if "parameters" in self.fields and not self.initial.get("parameters"):
            self.initial["parameters"] = EMPTY_SCHEMA

    @property
    def is_builtin(self) -> bool:
        return bool(self.instance.pk) and self.instance.kind == ToolRow.Kind.BUILTIN

    def clean_name(self) -> str:
        name = self.cleaned_data["name"]
        if not self.is_builtin and name in BUILTINS:
            raise forms.ValidationError(f"“{name}” is the name of a built-in tool; choose another.")
        return name

    def clean_policy(self) -> str:
        policy = self.cleaned_data.get("policy")
        if policy:
            return policy
        if self.instance.pk:
            return self.instance.policy
        team = self.cleaned_data.get("team")
        return team.tool_policy_default if isinstance(team, Team) else ToolPolicy.ASK

    def clean_min_role(self) -> str:
        return (self.cleaned_data.get("min_role") or self.instance.min_role
                or ToolRow._meta.get_field("min_role").get_default())

    def clean_parameters(self) -> Any:
        schema = self.cleaned_data.get("parameters")
        if schema in (None, "", {}):
            schema = dict(EMPTY_SCHEMA)
        problem = schema_problem(schema)
        if problem:
            raise forms.ValidationError(problem)
        return schema

    def clean_url_template(self) -> str:
        template = (self.cleaned_data.get("url_template") or "").strip()
        if self.is_builtin:
            return template
        problem = template_problem(template)
        if problem:
            raise forms.ValidationError(problem)
        return template

    def clean_headers(self) -> list[tuple[str, str]]:
        return header_lines_clean(self.cleaned_data.get("headers"))

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        template, schema = data.get("url_template"), data.get("parameters")
        if not self.is_builtin and template and isinstance(schema, dict):
            try:
                placeholders = UrlTemplate.parse(template).placeholders
            except TemplateError:
                placeholders = ()
            declared = schema.get("properties") or {}
            undeclared = [p for p in placeholders if p not in declared]
            if undeclared:
                names = ", ".join("{" + p + "}" for p in undeclared)
                self.add_error("parameters", f"The URL template uses {names}, which the schema "
                                             "does not declare. Add them to \"properties\".")
        return data


class ToolTryForm(forms.Form):
    arguments = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 8, "spellcheck": "false", "class": "vLargeTextField"}),
        help_text="The arguments as a JSON object, as a model would pass them.")
    agent = forms.ModelChoiceField(queryset=Agent.objects.none(), required=False,
                                   help_text="Run as a turn of this agent (memory tools use its "
                                             "memory about you).")

    def __init__(self, *args: Any, tool: ToolRow, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.tool = tool
        self.fields["agent"].queryset = Agent.objects.filter(team_id=tool.team_id).order_by("name")
        builtin = BUILTINS.get(tool.name) if tool.kind == ToolRow.Kind.BUILTIN else None
        self.needs_agent = bool(builtin and builtin.needs_agent)
        if self.needs_agent:
            self.fields["agent"].required = True

    def clean_arguments(self) -> dict[str, Any]:
        try:
            value = json.loads(self.cleaned_data["arguments"])
        except ValueError as exc:
            raise forms.ValidationError(f"This is not valid JSON: {exc}.") from None
        if not isinstance(value, dict):
            raise forms.ValidationError("The arguments must be a JSON object, like {\"city\": \"Oslo\"}.")
        return value
