"""How an answer ended, in the chat: an answer cut off at the output limit, refused or
filtered carries a badge on the stored message and in the bubble; text streamed before a turn
stopped stays in the chat, marked interrupted with the turn's one-sentence error; every figure
of tokens that was estimated says so. Turns run with the offline demo model."""

from __future__ import annotations

import pytest
from django.urls import reverse

from agents.chat import live, selectors
from agents.models import Message
from agents.runtime.messages import Message as RuntimeMessage
from agents.runtime.providers import registry
from agents.runtime.providers.demo import DemoProvider
from agents.turns.outcome import stored_messages
from agents.turns.services import turn_start
from agents.turns.tasks import turn_run
from tests.members import member_of
from traces.models import Step, Trace

turns = pytest.mark.django_db(transaction=True)


class FakeEndingDemoProvider(DemoProvider):
    """The offline model, with the finish reason a server gives for an answer it did not end
    itself (``stop_reason``: "length", "refusal", "content_filter")."""

    stop_reason = "length"

    def _respond(self, request):
        response, pieces = super()._respond(request)
        if not response.tool_calls:
            response.stop_reason = self.stop_reason
        return response, pieces


def answer_html(conversation, trace) -> str:
    trace = Trace.objects.select_related("conversation").get(pk=trace.pk)
    return live.chat_answer(trace)["answer"]


@turns
@pytest.mark.parametrize(("stop_reason", "outcome", "badge"), [
    ("length", "length", "cut off (output limit)"),
    ("max_tokens", "length", "cut off (output limit)"),
    ("refusal", "refusal", "refused"),
    ("content_filter", "filtered", "stopped by the content filter"),
])
def test_an_answer_that_did_not_end_by_itself_says_so_in_the_chat(
        monkeypatch, conversation, alice, sent_turns, use_redis, client_for, stop_reason, outcome,
        badge):
    monkeypatch.setattr(FakeEndingDemoProvider, "stop_reason", stop_reason)
    monkeypatch.setitem(registry.PROVIDER_CLASSES, "demo", FakeEndingDemoProvider)
    trace = turn_start(conversation=conversation, membership=member_of(alice, conversation), text="<script>alert(1)</script> hi")

    assert turn_run(trace.pk) == "completed"

    answer = Message.objects.filter(trace_id=trace.pk, role="assistant").latest("id")
    assert answer.outcome == outcome and "You said" in answer.text
    step = Step.objects.get(trace_id=trace.pk, kind="llm_request")
    assert (step.meta["stop_reason"], step.meta["outcome"]) == (stop_reason, outcome)
    for html in (answer_html(conversation, trace),
                 client_for(alice).get(reverse("conversation", args=[conversation.uuid])).content.decode()):
        assert f'<span class="badge">{badge}</span>' in html
        assert "<script>alert(1)</script>" not in html and "&lt;script&gt;" in html
    # the trace says it too, on the step
    page = client_for(alice).get(reverse("trace_detail", args=[trace.uuid])).content.decode()
    assert f'class="flag outcome-{outcome}">{badge}</span>' in page


@turns
def test_a_whole_answer_has_no_badge(conversation, alice, sent_turns, use_redis):
    trace = turn_start(conversation=conversation, membership=member_of(alice, conversation), text="hello")
    assert turn_run(trace.pk) == "completed"
    assert list(Message.objects.filter(trace_id=trace.pk, role="assistant").values_list("outcome", flat=True)) == [""]
    html = answer_html(conversation, trace)
    assert "answer-ending" not in html and 'class="badge"' not in html
    step = Step.objects.get(trace_id=trace.pk, kind="llm_request")
    assert step.meta["outcome"] == "complete"


@turns
def test_text_streamed_before_the_turn_stopped_stays_marked_interrupted(
        make_agent, alice, sent_turns, use_redis, client_for):
    from agents.chat.services import conversation_create

    # the offline model streams slowly; the step timeout stops it mid-answer
    agent = make_agent(name="Slow", provider_options={"token_delay_s": 0.25}, step_timeout_s=1)
    conversation = conversation_create(agent=agent, membership=member_of(alice, agent.team))
    trace = turn_start(conversation=conversation, membership=member_of(alice, conversation), text="Please explain something long")

    assert turn_run(trace.pk) == "timed_out"

    trace.refresh_from_db()
    partial = Message.objects.get(trace_id=trace.pk, role="assistant")
    assert partial.outcome == "interrupted" and partial.text.startswith("You said")
    assert len(partial.text) < len('You said: "Please explain something long". I\'m the offline demo model')
    html = answer_html(conversation, trace)
    assert partial.text.split()[0] in html and '<span class="badge">Interrupted:</span>' in html
    assert trace.error and "timed out" in trace.error
    assert html.count(trace.error) == 1 and "error-box" not in html  # told once, on the text


def test_stored_messages_mark_the_last_answer_only():
    messages = [RuntimeMessage.user("hi"), RuntimeMessage.assistant("First part")]
    rows = stored_messages(messages, [], ending="interrupted")
    assert [(r.role, r.text, r.outcome) for r in rows] == [("assistant", "First part", "interrupted")]
    tool_last = [RuntimeMessage.user("hi"), RuntimeMessage.assistant("x"),
                 RuntimeMessage.from_dict({"role": "tool", "blocks": [
                     {"type": "tool_result", "tool_use_id": "c1", "output": "2", "is_error": False}]})]
    assert [r.outcome for r in stored_messages(tool_last, [], ending="interrupted")] == ["", ""]


def test_an_interrupted_answer_shows_its_text_and_the_error_escaped(conversation, alice, sent_turns, client_for):
    trace = turn_start(conversation=conversation, membership=member_of(alice, conversation), text="hello")
    Trace.objects.filter(pk=trace.pk).update(
        status="failed", error_kind="provider",
        error="The model <b>server</b> stopped answering; try again in a minute.")
    Message.objects.create(conversation=conversation, role="assistant", trace_id=trace.pk,
                           text="Half an <i>answer</i>", outcome="interrupted",
                           blocks=[{"type": "text", "text": "Half an <i>answer</i>"}])

    html = answer_html(conversation, trace)
    assert "Half an" in html and "<i>answer</i>" not in html
    assert ('<span class="badge">Interrupted:</span> The model &lt;b&gt;server&lt;/b&gt; stopped '
            "answering; try again in a minute.") in html
    assert "error-box" not in html
    page = client_for(alice).get(reverse("conversation", args=[conversation.uuid])).content.decode()
    assert "Half an" in page and "<b>server</b>" not in page
    # a stop by the user keeps the text and says "Stopped." once, without a second badge
    Trace.objects.filter(pk=trace.pk).update(status="cancelled", error="Cancelled by alice.")
    html = answer_html(conversation, trace)
    assert "Half an" in html and "Stopped." in html and "Interrupted:" not in html


def test_charlie_cannot_read_the_badges_of_team_a(conversation, alice, charlie, sent_turns, client_for):
    trace = turn_start(conversation=conversation, membership=member_of(alice, conversation), text="hello")
    Message.objects.create(conversation=conversation, role="assistant", trace_id=trace.pk,
                           text="Secret", outcome="refusal", blocks=[{"type": "text", "text": "Secret"}])
    assert client_for(charlie).get(reverse("conversation", args=[conversation.uuid])).status_code == 404


# -- estimated tokens in the chat -----------------------------------------------------------------------
def test_the_meter_and_the_turn_say_when_tokens_are_estimated(conversation, alice, sent_turns, client_for):
    trace = turn_start(conversation=conversation, membership=member_of(alice, conversation), text="hello")
    Trace.objects.filter(pk=trace.pk).update(status="completed", input_tokens=1000, output_tokens=200)
    url = reverse("conversation", args=[conversation.uuid])

    page = client_for(alice).get(url).content.decode()
    assert '<span data-meter="approx" hidden>' in page and 'data-meter="estimated" hidden>' in page
    assert "1.2k tokens · " in page and "(estimated)" not in page.split('id="messages"')[1]

    Trace.objects.filter(pk=trace.pk).update(estimated_calls=1)
    page = client_for(alice).get(url).content.decode()
    assert '<span data-meter="approx">≈ </span><span class="meter-value" data-meter="tokens">1.2k</span> tokens' in page
    assert '<span class="meter-estimated" data-meter="estimated"> (estimated)</span>' in page
    assert "≈ 1.2k tokens (estimated) · " in page  # the turn's own line
    meter = selectors.chat_view(conversation).meter
    assert meter.estimated_calls == 1 and meter.total_tokens == 1200
