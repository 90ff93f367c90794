"""Hooks a team sets up around its agents' tool calls and messages: signed webhooks
(``webhook``), the operator's commands, the hooks of one turn (``build``), message hooks
(``messages``) and their admin (``admin``, registered from ``agents.admin``)."""

from __future__ import annotations

from .build import (
    operator_commands,
    runtime_hook,
    turn_message_hooks,
    turn_tool_hooks,
    with_hook_feedback_note,
)
from .messages import MessageVerdict, message_hooks_run
from .webhook import WebhookHook, signature, signature_valid, webhook_url_problem

__all__ = [
    "MessageVerdict",
    "WebhookHook",
    "message_hooks_run",
    "operator_commands",
    "runtime_hook",
    "signature",
    "signature_valid",
    "turn_message_hooks",
    "turn_tool_hooks",
    "webhook_url_problem",
    "with_hook_feedback_note",
]
