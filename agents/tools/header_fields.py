"""Write-only header fields, shared by the forms that store headers encrypted (HTTP tools, MCP
servers): the textarea never renders a value, not even the one just submitted; an empty field
keeps what is stored; a line that is not ``Name: value`` is refused with a sentence."""

from __future__ import annotations

from typing import Any

from django import forms

from .http import parse_header_lines


class WriteOnlyTextarea(forms.Textarea):
    """A textarea that never renders a value, not even the one just submitted."""

    def format_value(self, value: Any) -> None:
        return None


def headers_field(help_text: str) -> forms.CharField:
    return forms.CharField(
        required=False, strip=False, label="Headers",
        widget=WriteOnlyTextarea(attrs={"rows": 3, "autocomplete": "off", "spellcheck": "false",
                                        "placeholder": "Authorization: Bearer …"}),
        help_text=help_text)


def header_lines_clean(value: str | None) -> list[tuple[str, str]]:
    try:
        return parse_header_lines(value or "")
    except ValueError as exc:
        raise forms.ValidationError(str(exc)) from None
