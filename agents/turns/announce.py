"""What a turn announces live. The inspector's announcements (``traces.record.live.INSPECTOR``) by
default; the agents app hands the chat's (which add the conversation's fragments) to
``announcements_use`` when it starts, because turns never import the chat (LAYOUT.md)."""

from __future__ import annotations

from traces.record.live import INSPECTOR, Announcements

_current: list[Announcements] = [INSPECTOR]


def announcements() -> Announcements:
    return _current[0]


def announcements_use(chosen: Announcements) -> None:
    _current[0] = chosen
