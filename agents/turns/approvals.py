"""Deciding on a tool call that waits for approval in a running turn: who may (the
conversation's owner or a team admin, as for every action in it), and the decision sent to the
worker that waits for it.
"""

from __future__ import annotations

from django.core.exceptions import ValidationError

from agents.access import conversation_act_check
from agents.turns.selectors import approval_waiting
from agents.turns.signals import approval_signal_send
from agentsite.models import Membership
from traces.models import Trace


def _deciding_role(trace: Trace, membership: Membership) -> str:
    if trace.conversation.created_by_id == membership.user_id:
        return "the conversation's owner"
    return f"a team {membership.get_role_display().lower()}"


APPROVAL_REASON_MAX_CHARS = 500


def approval_decide(*, trace: Trace, call_id: str, approved: bool, membership: Membership,
                    reason: str = "") -> None:
    """Approve or deny a tool call that waits for approval in a running turn. ``reason``: why,
    in the person's words (one line, at most ``APPROVAL_REASON_MAX_CHARS``); the model reads it
    with a denial. A call that does not wait is a ValidationError with code ``not_waiting``, a
    decision Redis did not take one with code ``undelivered``."""
    conversation_act_check(membership, trace.conversation, "approve or deny its tool calls")
    running = Trace.objects.filter(pk=trace.pk, status=Trace.Status.RUNNING).exists()
    if not running or approval_waiting(trace=trace, call_id=call_id) is None:
        raise ValidationError("This tool call is not waiting for approval any more.",
                              code="not_waiting")
    reason = " ".join((reason or "").split())[:APPROVAL_REASON_MAX_CHARS]
    if not approval_signal_send(trace_uuid=trace.uuid, call_id=call_id, approved=approved,
                                decided_by=membership.user.get_username(),
                                role=_deciding_role(trace, membership), reason=reason):
        raise ValidationError("Your decision could not be delivered to the worker. Try again in "
                              "a moment.", code="undelivered")
