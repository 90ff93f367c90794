"""Chat commands (ZeroClaw's channel runtime commands): parsing and the replies they get.

A message is a command when its first word is ``/`` followed by a command name made of
letters, digits, ``_`` and ``-`` (starting with a letter), optionally followed by ``@botname``.
So ``/model gpt-4o`` and ``/STOP@agent_bot`` are commands, while ``/usr/bin is a directory`` or
``/ 2 = 0.5`` are ordinary messages. An unknown ``/word`` parses as an ``unknown`` command: the
chat answers it with the help text and never sends it to the model.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum


class CommandName(StrEnum):
    NEW = "new"
    MODEL = "model"
    MODELS = "models"
    STOP = "stop"
    HELP = "help"
    UNKNOWN = "unknown"


@dataclass(frozen=True, slots=True)
class Command:
    name: CommandName
    # Everything after the command word, stripped ("" when there is nothing).
    argument: str = ""
    # The command word as typed, without the @botname suffix (e.g. "/Model").
    token: str = ""


HELP_TEXT = (
    "Commands:\n"
    "/new — start a new conversation\n"
    "/model — show which model answers here\n"
    "/model <name> — switch this conversation to another model\n"
    "/models — list the models you can switch to\n"
    "/stop — stop the reply that is being written\n"
    "/help — show this list"
)


def command_list() -> list[tuple[str, str]]:
    """The commands and what they do, for the chat's "/" palette (the lines of ``HELP_TEXT``)."""
    rows = []
    for line in HELP_TEXT.splitlines()[1:]:
        usage, _, what = line.partition(" — ")
        rows.append((usage.strip(), what.strip()))
    return rows


_COMMAND_WORD = re.compile(r"/[A-Za-z][A-Za-z0-9_-]*")


def command_word(text: str) -> tuple[str, str] | None:
    """(command word without @suffix, rest of the message) when ``text`` starts with one."""
    stripped = text.strip()
    if not stripped.startswith("/"):
        return None
    parts = stripped.split(maxsplit=1)
    word = parts[0].split("@", 1)[0]
    rest = parts[1].strip() if len(parts) > 1 else ""
    return word, rest


def parse_command(text: str) -> Command | None:
    """The command ``text`` starts with, or None for an ordinary message."""
    found = command_word(text)
    if found is None or not _COMMAND_WORD.fullmatch(found[0]):
        return None
    word, argument = found
    try:
        name = CommandName(word[1:].lower())
    except ValueError:
        name = CommandName.UNKNOWN
    return Command(name=name, argument=argument, token=word)


def unknown_command_reply(command: Command) -> str:
    return f"Unknown command {command.token}.\n\n{HELP_TEXT}"
