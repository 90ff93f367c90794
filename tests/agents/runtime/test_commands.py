from __future__ import annotations

import pytest

from agents.runtime.commands import (
    HELP_TEXT,
    Command,
    CommandName,
    parse_command,
    unknown_command_reply,
)
from agents.runtime.upstream_ports import (
    interruption_scope_key,
    is_stop_command,
    message_timeout_budget_secs,
)


@pytest.mark.parametrize(("text", "expected"), [
    ("/new", Command(CommandName.NEW, "", "/new")),
    ("  /NEW  ", Command(CommandName.NEW, "", "/NEW")),
    ("/model", Command(CommandName.MODEL, "", "/model")),
    ("/model   gpt-4o mini ", Command(CommandName.MODEL, "gpt-4o mini", "/model")),
    ("/Models@agent_bot anthropic", Command(CommandName.MODELS, "anthropic", "/Models")),
    ("/stop@zeroclaw_bot", Command(CommandName.STOP, "", "/stop")),
    ("/help", Command(CommandName.HELP, "", "/help")),
    ("/xyz do things", Command(CommandName.UNKNOWN, "do things", "/xyz")),
    ("/stop-all", Command(CommandName.UNKNOWN, "", "/stop-all")),
])
def test_commands_are_parsed_from_the_first_word(text: str, expected: Command) -> None:
    assert parse_command(text) == expected


@pytest.mark.parametrize("text", [
    "hello /new", "", "   ", "/", "/usr/bin is a directory", "/ 2 = 0.5", "/2fa code",
    "//comment", "/путь", "new",
])
def test_ordinary_messages_are_not_commands(text: str) -> None:
    assert parse_command(text) is None


def test_stop_detection_agrees_with_the_parser() -> None:
    for text in ["/stop", " /STOP now", "/stop@bot", "/stopwatch", "/stop-all", "stop", "/new"]:
        command = parse_command(text)
        assert is_stop_command(text) == (command is not None and command.name == CommandName.STOP)


def test_unknown_commands_are_answered_with_the_help_text() -> None:
    command = parse_command("/frobnicate")
    assert command is not None
    reply = unknown_command_reply(command)
    assert reply.startswith("Unknown command /frobnicate.")
    assert reply.endswith(HELP_TEXT)
    for name in ("/new", "/model", "/models", "/stop", "/help"):
        assert f"\n{name} " in f"\n{HELP_TEXT}"


def test_turn_time_budget_scales_with_tool_iterations_within_the_cap() -> None:
    assert message_timeout_budget_secs(300, 3) == 900
    assert message_timeout_budget_secs(300, 50) == 1200
    assert message_timeout_budget_secs(300, 5, scale_cap=0) == 300  # never a zero budget


def test_keys_name_the_channel_target_and_sender() -> None:
    assert interruption_scope_key("web", "conv", "alice") == "web_conv_alice"
    assert interruption_scope_key("web", "conv", "alice", "") == "web_conv_alice"
