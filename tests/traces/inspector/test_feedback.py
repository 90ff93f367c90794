"""Ratings: thumbs up or down on an answer with an optional comment, one per person and trace,
kept with the trace, shown in the inspector and the chat, and a filter of the trace list."""

from __future__ import annotations

from django.urls import reverse

from traces.models import Feedback, Trace


def rate(client, trace, rating, comment="", **headers):
    return client.post(reverse("trace_feedback", args=[trace.uuid]), {"rating": rating, "comment": comment},
                       **headers)


def test_a_member_rates_an_answer_and_can_change_or_take_it_back(client_for, alice, sample_trace):
    c = client_for(alice)
    rate(c, sample_trace, "down", "It used the wrong tool")
    feedback = Feedback.objects.get(trace=sample_trace, user=alice)
    assert (feedback.rating, feedback.comment, feedback.team_id) == (-1, "It used the wrong tool", sample_trace.team_id)
    rate(c, sample_trace, "up")
    assert Feedback.objects.get(trace=sample_trace).rating == 1 and Feedback.objects.count() == 1
    rate(c, sample_trace, "")
    assert not Feedback.objects.exists()


def test_htmx_gets_the_buttons_back_pressed(client_for, alice, sample_trace):
    response = rate(client_for(alice), sample_trace, "up", HTTP_HX_REQUEST="true")
    html = response.content.decode()
    assert response.status_code == 200 and html.lstrip().startswith(f'<div class="feedback" id="feedback-{sample_trace.uuid.hex}"')
    assert 'aria-label="Good answer">' in html and 'aria-pressed="true" title="Good answer"' in html


def test_a_too_long_comment_is_refused_and_nothing_is_stored(client_for, alice, sample_trace):
    response = rate(client_for(alice), sample_trace, "down", "x" * 2001, HTTP_HX_REQUEST="true")
    assert response.status_code == 422 and "the limit is 2,000" in response.content.decode()
    assert not Feedback.objects.exists()


def test_viewers_and_other_teams_cannot_rate(client_for, vera, charlie, sample_trace):
    assert rate(client_for(vera), sample_trace, "up").status_code == 403
    assert rate(client_for(charlie), sample_trace, "up").status_code == 404
    assert not Feedback.objects.exists()


def test_the_inspector_shows_every_rating_escaped(client_for, alice, bob, sample_trace):
    Feedback.objects.create(team=sample_trace.team, trace=sample_trace, user=bob, rating=-1, comment="<b>wrong</b>")
    html = client_for(alice).get(reverse("trace_detail", args=[sample_trace.uuid])).content.decode()
    assert "<strong>bob</strong>: <span class=\"rating-comment\">&lt;b&gt;wrong&lt;/b&gt;</span>" in html
    assert f'id="feedback-{sample_trace.uuid.hex}"' in html  # alice may rate it too


def test_the_trace_list_filters_by_rating(client_for, alice, sample_trace, conversation):
    other = Trace.objects.create(team=sample_trace.team, conversation=conversation, user=alice, status="completed")
    Feedback.objects.create(team=sample_trace.team, trace=sample_trace, user=alice, rating=1)
    c = client_for(alice)

    def listed(value):
        html = c.get(reverse("traces") + f"?feedback={value}").content.decode()
        return {t for t in (sample_trace, other) if str(t.uuid) in html}

    assert listed("up") == {sample_trace} and listed("any") == {sample_trace}
    assert listed("down") == set() and listed("none") == {other}
    assert "Unknown rating." in c.get(reverse("traces") + "?feedback=meh").content.decode()


def test_the_chat_shows_the_readers_own_rating(client_for, alice, bob, conversation, sample_trace):
    Trace.objects.filter(pk=sample_trace.pk).update(status="completed")
    Feedback.objects.create(team=sample_trace.team, trace=sample_trace, user=alice, rating=-1)
    html = client_for(alice).get(reverse("conversation", args=[conversation.uuid])).content.decode()
    assert 'aria-pressed="true" title="Bad answer"' in html
