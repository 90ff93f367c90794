"""Rate limits of a person apply in the chat as through the API: the same ``turn_send``, the
message refused with the limit's words (never a 500), and no turn started."""

from __future__ import annotations

import pytest

from agents.turns.quotas import QuotaExceeded
from agents.turns.services import turn_send
from agentsite.models import Membership
from tests.members import acting_of
from traces.models import Trace

pytestmark = pytest.mark.django_db


def test_a_persons_requests_per_minute_hold_in_the_chat(conversation, alice, team_a, use_redis,
                                                         sent_turns, client_for):
    Membership.objects.filter(user=alice, team=team_a).update(rpm_limit=1)
    turn_send(acting=acting_of(alice, conversation), text="first")
    with pytest.raises(QuotaExceeded, match="1 requests per minute"):
        turn_send(acting=acting_of(alice, conversation), text="second")

    response = client_for(alice).post(f"/chat/{conversation.uuid}/send/", {"text": "third"},
                                      HTTP_HX_REQUEST="true")
    assert response.status_code < 500
    assert "Rate limit reached" in response.content.decode()
    assert Trace.objects.count() == 1


def test_a_persons_tokens_per_minute_count_what_they_send(conversation, alice, team_a, use_redis,
                                                          sent_turns):
    Membership.objects.filter(user=alice, team=team_a).update(tpm_limit=40)
    turn_send(acting=acting_of(alice, conversation), text="x" * 100)  # ceil(100/4) + 4 = 29
    with pytest.raises(QuotaExceeded, match="40 tokens per minute"):
        turn_send(acting=acting_of(alice, conversation), text="y" * 100)
    membership = Membership.objects.get(user=alice, team=team_a)
    assert Trace.objects.get().quota_keys == [f"member:{membership.uuid.hex}"]
