"""Headers an admin gives for outgoing requests (HTTP tools, MCP servers, trace exporters):
``Name: value`` lines parsed with a plain sentence for each mistake, and the write-only form
field they are entered in. Values are credentials more often than not: the field never
renders one, not even the one just submitted; an empty field keeps what is stored."""

from __future__ import annotations

import re
from typing import Any

from django import forms

HEADER_NAME = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")
FORBIDDEN_HEADERS = frozenset({"host", "content-length", "transfer-encoding", "connection",
                               "upgrade", "te", "trailer", "keep-alive", "proxy-authorization",
                               "proxy-connection"})


def parse_header_lines(text: str) -> list[tuple[str, str]]:
    """``Name: value`` lines (blank lines ignored) as pairs; ``ValueError`` says what is wrong.
    The message never repeats a value."""
    pairs: list[tuple[str, str]] = []
    for number, line in enumerate((text or "").splitlines(), start=1):
        if not line.strip():
            continue
        name, sep, value = line.partition(":")
        name, value = name.strip(), value.strip()
        if not sep or not name:
            raise ValueError(f"Line {number} is not of the form “Name: value”.")
        if not HEADER_NAME.match(name):
            raise ValueError(f"Line {number}: “{name[:60]}” is not a valid header name.")
        if name.lower() in FORBIDDEN_HEADERS:
            raise ValueError(f"Line {number}: the {name} header is set by agentsite and cannot be "
                             "given here.")
        if any(c in value for c in "\r\n\x00"):
            raise ValueError(f"Line {number}: the value of {name} contains a line break.")
        pairs.append((name, value))
    return pairs


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
