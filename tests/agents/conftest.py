"""Fixtures of the agents' rooms. (The agent, the conversation, captured task sends,
``make_agent`` and ``run_in_thread`` are shared by every app, in ``tests/conftest.py``.)"""

from __future__ import annotations

import pytest


@pytest.fixture
def queued_trace(conversation, sent_turns):
    """``queued_trace(client)``: the trace of a message sent through the chat's send endpoint
    by ``client``'s user (its task is captured, so it stays queued)."""
    from django.urls import reverse

    from traces.models import Trace

    def send(client) -> Trace:
        client.post(reverse("message_send", args=[conversation.uuid]), {"text": "hello"})
        return Trace.objects.latest("id")

    return send
