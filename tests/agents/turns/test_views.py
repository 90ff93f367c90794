"""The turn endpoints the chat posts to: stop a turn, decide an approval."""

from __future__ import annotations

from django.urls import reverse


def test_member_stops_a_queued_turn(client_for, alice, queued_trace):
    c = client_for(alice)
    trace = queued_trace(c)
    assert c.post(reverse("trace_cancel", args=[trace.uuid]), HTTP_HX_REQUEST="true").status_code == 204
    trace.refresh_from_db()
    assert trace.status == "cancelled"


def test_approval_of_a_call_that_is_not_waiting_says_so(client_for, alice, queued_trace):
    c = client_for(alice)
    trace = queued_trace(c)
    response = c.post(reverse("approval_decision", args=[trace.uuid, "call_1"]), {"approved": "1"}, HTTP_HX_REQUEST="true")
    assert response.status_code == 409 and b"not waiting for approval" in response.content


def test_charlie_gets_404_on_the_turn_endpoints(client_for, alice, charlie, queued_trace):
    trace = queued_trace(client_for(alice))
    c = client_for(charlie)
    assert c.post(reverse("trace_cancel", args=[trace.uuid])).status_code == 404
    assert c.post(reverse("approval_decision", args=[trace.uuid, "call_1"]), {"approved": "1"}).status_code == 404
    trace.refresh_from_db()
    assert trace.status == "queued"
