"""Line diffs as the admin shows them (agent versions, the audit trail): ``pre.unified-diff``
with added, removed, unchanged and hunk-header lines."""

from __future__ import annotations

import difflib

from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString


def unified_lines(before: str, after: str, *, context: int = 2) -> tuple[tuple[str, str], ...]:
    """(tag, line) for each line of the unified diff; tag is add, remove, same or hunk."""
    lines: list[tuple[str, str]] = []
    diff = difflib.unified_diff(before.splitlines(), after.splitlines(), lineterm="", n=context)
    for line in diff:
        if line.startswith(("---", "+++")):
            continue
        if line.startswith("@@"):
            lines.append(("hunk", line))
        elif line.startswith("+"):
            lines.append(("add", line[1:]))
        elif line.startswith("-"):
            lines.append(("remove", line[1:]))
        else:
            lines.append(("same", line[1:]))
    return tuple(lines)


_MARKUP = {"add": '<ins class="add">+ {}</ins>', "remove": '<del class="remove">- {}</del>',
           "hunk": '<span class="hunk">{}</span>', "same": '<span class="same">  {}</span>'}


def unified_diff_html(before: str, after: str) -> SafeString:
    """The diff as ``pre.unified-diff`` markup, every line escaped."""
    rows = format_html_join("", "{}", ((format_html(_MARKUP[tag], line),) for tag, line in unified_lines(before, after)))
    return format_html('<pre class="unified-diff">{}</pre>', rows)
