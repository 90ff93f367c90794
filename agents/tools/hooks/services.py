"""Saving a hook and sending it a test event."""

from __future__ import annotations

import json
import secrets

from asgiref.sync import async_to_sync

from agents.models import Hook
from agents.runtime.hooks import (
    MESSAGE_RECEIVED,
    MESSAGE_SENDING,
    PRE_TOOL_USE,
    HookRun,
    hook_payload,
    message_payload,
)

from .build import runtime_hook

SAMPLE_TOOL = "calculator"
SAMPLE_ARGUMENTS = {"expression": "2+3"}
SAMPLE_MESSAGES = {
    MESSAGE_RECEIVED: "Hello! This is a test message from agentsite.",
    MESSAGE_SENDING: "This is a test reply from agentsite.",
}


def hook_secret_generate() -> str:
    return secrets.token_urlsafe(32)


def hook_save(*, hook: Hook, secret: str | None = None, generate: bool = False) -> str | None:
    """Save ``hook``. ``secret``: a new signing secret (None or empty keeps the stored one);
    ``generate``: make a new one. A webhook without a secret gets one. Returns the secret
    when one was generated (to show once), else None."""
    generated = None
    if hook.kind == Hook.Kind.WEBHOOK:
        if secret:
            hook.set_secret(secret)
        elif generate or not hook.secret_encrypted:
            generated = hook_secret_generate()
            hook.set_secret(generated)
    hook.save()
    return generated


def hook_sample_payload(hook: Hook) -> tuple[str, dict]:
    """The event a test sends: a sample calculator call, or a sample message."""
    if hook.event in (MESSAGE_RECEIVED, MESSAGE_SENDING):
        return hook.event, message_payload(hook.event, SAMPLE_MESSAGES[hook.event],
                                           agent="(test)", conversation="test", sender="test")
    event = hook.event or PRE_TOOL_USE
    tool_name = SAMPLE_TOOL
    if hook.matcher.strip() and "*" not in hook.matcher:
        tool_name = hook.matcher.replace("|", ",").split(",")[0].strip() or SAMPLE_TOOL
    output = "5" if event != PRE_TOOL_USE else None
    return event, hook_payload(event, tool_name, json.dumps(SAMPLE_ARGUMENTS), output, False)


def hook_test_event(*, hook: Hook) -> HookRun:
    """Run ``hook`` once with a sample event, as a turn would (it must be saved)."""
    event, payload = hook_sample_payload(hook)
    runtime = runtime_hook(hook)
    if runtime is None:
        return HookRun(hook=hook.name, kind=hook.kind, event=event, outcome="failed",
                       messages=[f"The operator command '{hook.operator_key}' is not set up "
                                 "(HOOK_COMMANDS)."])
    return async_to_sync(runtime.run)(event, payload)
