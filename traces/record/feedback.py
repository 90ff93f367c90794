"""A person's rating of an answer: thumbs up or down, with an optional comment, one per person
and trace (``traces.models.Feedback``; the inspector shows them and filters the list by them)."""

from __future__ import annotations

from django.core.exceptions import PermissionDenied, ValidationError

from agentsite.models import Membership

from ..models import Feedback, Trace

FEEDBACK_COMMENT_MAX = 2000


def feedback_set(*, trace: Trace, membership: Membership, rating: str, comment: str = "") -> Feedback | None:
    """The person's thumbs up (``"up"``) or down (``"down"``) on an answer, with an optional
    comment; ``""`` takes it back. The caller has checked they may see the trace; viewers only
    read, so they do not rate."""
    if not membership.can_chat:
        raise PermissionDenied("Your role lets you read answers, not rate them.")
    comment = (comment or "").strip()
    if len(comment) > FEEDBACK_COMMENT_MAX:
        raise ValidationError(f"The comment is {len(comment):,} characters long; the limit is "
                              f"{FEEDBACK_COMMENT_MAX:,}.")
    if rating not in ("up", "down", ""):
        raise ValidationError("Rate an answer up or down.")
    if not rating:
        Feedback.objects.filter(trace=trace, user_id=membership.user_id).delete()
        return None
    value = Feedback.Rating.UP if rating == "up" else Feedback.Rating.DOWN
    feedback, _ = Feedback.objects.update_or_create(
        trace=trace, user_id=membership.user_id,
        defaults={"team_id": trace.team_id, "rating": value, "comment": comment})
    return feedback
