"""The chat's actions and reads: branches (regenerate, edit), history along a branch, chat
commands, resends, the meter and tool cards. Turns run here, with the offline demo model."""

from __future__ import annotations

import json
from datetime import timedelta
from decimal import Decimal

import pytest
from django.urls import reverse
from django.utils import timezone

from agents.chat import live, selectors, services
from agents.models import Conversation, Message, ProviderModel
from agents.runtime.commands import HELP_TEXT
from agents.runtime.history import estimate_tokens
from agents.runtime.messages import Message as RuntimeMessage
from agents.turns import services as turn_services
from agents.turns import tool_cards
from agents.turns.builder import previous_trajectory_state, turn_history
from agents.turns.routing import route_turn
from agents.turns.tasks import turn_run
from agents.turns.windows import DEFAULT_CONTEXT_WINDOW, context_window
from tests.members import acting_of, member_of
from traces.models import Step, StepPayload, Trace

turns = pytest.mark.django_db(transaction=True)


def send(conversation, user, text, **kwargs) -> Trace:
    return turn_services.turn_start(conversation=conversation, membership=member_of(user, conversation), text=text, **kwargs)


def answered(trace: Trace) -> Trace:
    assert turn_run(trace.pk) == "completed"
    return Trace.objects.get(pk=trace.pk)


def texts(history) -> list[tuple[str, str]]:
    """What was said, leaving out tool plumbing."""
    return [(str(m.role), m.text) for m in history if m.text]


# -- branches ----------------------------------------------------------------------------------------
@turns
def test_regenerate_answers_the_same_message_on_a_new_branch(conversation, alice, sent_turns, use_redis):
    first = answered(send(conversation, alice, "What is 2 + 3?"))
    again = turn_services.turn_regenerate(conversation=conversation, trace=first, membership=member_of(alice, conversation))
    assert again.user_message_id == first.user_message_id and again.pk != first.pk
    assert sent_turns == [first.pk, again.pk]
    answered(again)

    view = selectors.chat_view(conversation)
    assert view.leaf.pk == again.pk and [t.trace.pk for t in view.turns] == [again.pk]
    versions = view.turns[0].answer_versions
    assert (versions.index, versions.count, versions.previous, versions.next) == (2, 2, first.uuid, None)
    assert view.turns[0].message_versions.count == 1  # one message, two answers

    old = selectors.chat_view(conversation, at=first.uuid)
    assert old.leaf.pk == first.pk and old.turns[0].answer_versions.index == 1


@turns
def test_an_edit_starts_a_branch_and_the_history_follows_the_branch(conversation, alice, sent_turns, use_redis):
    first = answered(send(conversation, alice, "What is 2 + 3?"))
    second = answered(send(conversation, alice, "What is 6 * 7?"))
    edited = turn_services.turn_edit(conversation=conversation, message=second.user_message, membership=member_of(alice, conversation),
                                text="What is 4 * 5?")
    assert edited.user_message.parent_turn_id == first.pk
    history = turn_history(trace=edited, agent=conversation.agent)
    assert texts(history) == [("user", "What is 2 + 3?"), ("assistant", "2 + 3 = 5.")]
    edited = answered(edited)

    third = send(conversation, alice, "thanks")  # continues the newest branch by default
    assert third.user_message.parent_turn_id == edited.pk
    history = texts(turn_history(trace=third, agent=conversation.agent))
    assert ("user", "What is 4 * 5?") in history and ("assistant", "4 × 5 = 20.") in history
    assert ("user", "What is 6 * 7?") not in history and ("assistant", "6 × 7 = 42.") not in history

    # the original branch stays reachable, and continuing it keeps to it
    old = selectors.chat_view(conversation, at=second.uuid)
    assert [t.user_message.text for t in old.turns] == ["What is 2 + 3?", "What is 6 * 7?"]
    assert old.turns[1].message_versions.count == 2 and old.turns[1].message_versions.next is not None
    fourth = send(conversation, alice, "and again?", parent=second)
    assert ("assistant", "6 × 7 = 42.") in texts(turn_history(trace=fourth, agent=conversation.agent))


@turns
def test_the_trajectory_state_carried_over_is_the_branchs_own(conversation, alice, sent_turns, use_redis):
    first = answered(send(conversation, alice, "what is 12*7?"))
    other = answered(send(conversation, alice, "what is the time?", parent=None))  # a branch from the start
    assert other.user_message.parent_turn_id is None
    follow = send(conversation, alice, "thanks", parent=first)
    state = previous_trajectory_state(trace=follow)
    assert state is not None and "calculator" in json.dumps(state)
    assert "current_time" not in json.dumps(state)


@turns
def test_a_running_answer_cannot_be_regenerated(conversation, alice, sent_turns):
    trace = send(conversation, alice, "hello")
    with pytest.raises(turn_services.ValidationError, match="still being written"):
        turn_services.turn_regenerate(conversation=conversation, trace=trace, membership=member_of(alice, conversation))


@turns
def test_a_parent_from_another_conversation_is_refused(conversation, agent, alice, sent_turns):
    elsewhere = services.conversation_create(agent=agent, membership=member_of(alice, agent.team))
    foreign = send(elsewhere, alice, "hello")
    with pytest.raises(turn_services.ValidationError, match="another conversation"):
        send(conversation, alice, "hi", parent=foreign)


# -- resends -----------------------------------------------------------------------------------------
def test_a_resent_message_with_the_same_client_id_starts_one_turn(conversation, alice, sent_turns):
    first = send(conversation, alice, "hello", client_id="c-123")
    again = send(conversation, alice, "hello", client_id="c-123")
    assert again.pk == first.pk
    resent = turn_services.turn_send(acting=acting_of(alice, conversation), text="hello",
                                     client_id="c-123")
    assert resent.resent and resent.trace.pk == first.pk
    assert Message.objects.filter(conversation=conversation).count() == 1 and Trace.objects.count() == 1
    other = send(conversation, alice, "hello", client_id="c-456")
    assert other.pk != first.pk and Trace.objects.count() == 2


def test_the_send_endpoint_dedupes_a_resend(client_for, alice, conversation, sent_turns):
    c = client_for(alice)
    url = reverse("message_send", args=[conversation.uuid])
    one = c.post(url, {"text": "hello", "client_id": "abc"}, HTTP_HX_REQUEST="true")
    two = c.post(url, {"text": "hello", "client_id": "abc"}, HTTP_HX_REQUEST="true")
    assert one.status_code == two.status_code == 200
    trace = Trace.objects.get()
    assert f'id="answer-{trace.uuid.hex}"' in two.content.decode() and Message.objects.count() == 1


# -- commands ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("text, expected", [
    ("/help", "/model &lt;name&gt; — switch this conversation"),
    ("/HELP@agent_bot", "/stop — stop the reply"),
    ("/frobnicate now", "Unknown command /frobnicate."),
    ("/models", "has no other models"),
    ("/model", "This conversation uses demo."),
    ("/stop", "Nothing is running here."),
])
def test_commands_answer_in_the_chat_and_never_reach_the_model(client_for, alice, conversation, sent_turns, text, expected):
    response = client_for(alice).post(reverse("message_send", args=[conversation.uuid]), {"text": text},
                                      HTTP_HX_REQUEST="true")
    body = response.content.decode()
    assert response.status_code == 200 and expected in body and "never reach the model" in body
    assert not Trace.objects.exists() and not Message.objects.exists() and sent_turns == []


def test_unknown_commands_answer_with_the_help_text(conversation, alice):
    reply = services.chat_command(acting=acting_of(alice, conversation), text="/nope")
    assert reply.command == "unknown" and reply.text.endswith(HELP_TEXT)


def test_a_slash_that_is_not_a_command_is_an_ordinary_message(conversation, alice, sent_turns):
    assert services.chat_command(acting=acting_of(alice, conversation), text="/usr/bin is a directory") is None
    assert services.chat_command(acting=acting_of(alice, conversation), text="/ 2 = 0.5") is None


def test_model_switches_only_to_the_agents_allowed_models(conversation, agent, alice):
    agent.allowed_models = ["demo-large", "demo-mini"]
    agent.save()
    refused = services.chat_command(acting=acting_of(alice, conversation), text="/model gpt-4o")
    assert "not one of the models" in refused.text and "demo-large" in refused.text
    conversation.refresh_from_db()
    assert conversation.model_override == "" and not refused.changed_model

    switched = services.chat_command(acting=acting_of(alice, conversation), text="/model DEMO-large")
    conversation.refresh_from_db()
    assert switched.changed_model and conversation.model_override == "demo-large"
    assert route_turn(agent=agent, conversation=conversation, text="hi").model == "demo-large"
    listing = services.chat_command(acting=acting_of(alice, conversation), text="/models").text
    assert "• demo-large" in listing and "demo (the agent’s default)" in listing

    back = services.chat_command(acting=acting_of(alice, conversation), text="/model demo")
    conversation.refresh_from_db()
    assert back.changed_model and conversation.model_override == ""


def test_model_change_updates_the_header_and_meter(client_for, alice, conversation, agent):
    agent.allowed_models = ["gpt-4o"]
    agent.save()
    body = client_for(alice).post(reverse("message_send", args=[conversation.uuid]), {"text": "/model gpt-4o"},
                                  HTTP_HX_REQUEST="true").content.decode()
    assert '<span id="chat-model" hx-swap-oob="true">gpt-4o</span>' in body
    assert 'id="meter"' in body and "/128k" in body


def test_stop_cancels_the_turns_of_the_conversation(conversation, alice, sent_turns):
    trace = send(conversation, alice, "hello")
    reply = services.chat_command(acting=acting_of(alice, conversation), text="/stop")
    assert reply.text == "Stopped the reply."
    trace.refresh_from_db()
    assert trace.status == "cancelled" and trace.cancel_reason == "Cancelled by alice"


def test_new_starts_a_conversation_with_the_same_agent(client_for, alice, conversation):
    response = client_for(alice).post(reverse("message_send", args=[conversation.uuid]), {"text": "/new"},
                                      HTTP_HX_REQUEST="true")
    fresh = Conversation.objects.exclude(pk=conversation.pk).get()
    assert fresh.agent_id == conversation.agent_id and fresh.created_by == alice
    assert response.status_code == 204 and response["HX-Redirect"] == reverse("conversation", args=[fresh.uuid])
    plain = client_for(alice).post(reverse("message_send", args=[conversation.uuid]), {"text": "/new"})
    assert plain.status_code == 302 and Conversation.objects.count() == 3


def test_viewers_cannot_run_commands(client_for, conversation, vera):
    response = client_for(vera).post(reverse("message_send", args=[conversation.uuid]), {"text": "/new"})
    assert response.status_code == 403 and Conversation.objects.count() == 1


# -- the meter and the context window ----------------------------------------------------------------
@turns
def test_the_meter_counts_every_branch_and_measures_the_branch_on_screen(conversation, agent, alice, sent_turns, use_redis):
    agent.system_prompt = "x" * 400
    agent.save()
    first = answered(send(conversation, alice, "What is 2 + 3?"))
    again = answered(turn_services.turn_regenerate(conversation=conversation, trace=first, membership=member_of(alice, conversation)))
    Trace.objects.filter(pk=first.pk).update(cost_usd=Decimal("0.25"))
    Trace.objects.filter(pk=again.pk).update(cost_usd=Decimal("0.5"))

    conversation.refresh_from_db()
    meter = selectors.chat_view(conversation).meter
    traces = [Trace.objects.get(pk=first.pk), Trace.objects.get(pk=again.pk)]
    assert meter.total_tokens == sum(t.total_tokens for t in traces) > 0
    assert meter.cost_usd == Decimal("0.75")
    branch = [m for m in Message.objects.filter(conversation=conversation).order_by("id")
              if m.trace_id == again.pk or m.pk == again.user_message_id]
    estimate = estimate_tokens([RuntimeMessage.from_dict({"role": m.role, "blocks": m.blocks}) for m in branch]) + 100
    # the model's own count of the branch's last request and its answer (tool specs included)
    last = Step.objects.filter(trace=again, kind="llm_request").order_by("-seq").first()
    assert last.total_tokens > estimate
    assert meter.context_tokens == last.total_tokens
    assert (meter.model, meter.context_window) == ("demo", 8192)

    # with no request measured on the branch, the estimate of its messages stands
    Step.objects.filter(trace=again).delete()
    assert selectors.chat_view(conversation).meter.context_tokens == estimate


@pytest.mark.django_db
def test_context_windows_come_from_the_catalogue_or_the_provider(team_a, team_b):
    from traces.models import ModelPrice

    assert context_window("gpt-4o-mini") == 128_000
    assert context_window("openai/gpt-4.1-nano") == 1_047_576  # the vendor-qualified name
    assert context_window("gpt-4") == 8_192 and context_window("claude-sonnet-4-6", provider_kind="anthropic") == 1_000_000
    assert context_window("claude-opus-4-6-20260301") == 1_000_000  # a dated version of its model
    assert context_window("gpt-5.2-mini") == DEFAULT_CONTEXT_WINDOW  # never a sibling's (gpt-5.2: 272k)
    assert context_window("my-local-model") == DEFAULT_CONTEXT_WINDOW
    assert context_window("my-local-model", 4096) == 4096
    assert context_window("gpt-4o", None) == 128_000
    # a team's own row says it for that team only
    ModelPrice.objects.create(team=team_a, model="my-local-model", input_per_mtok=0, output_per_mtok=0,
                              effective_from=timezone.now() - timedelta(days=1), context_window=65_536)
    assert context_window("my-local-model", team_id=team_a.pk) == 65_536
    assert context_window("my-local-model", team_id=team_b.pk) == DEFAULT_CONTEXT_WINDOW


def test_the_meter_uses_the_model_row_over_the_provider_over_the_table(conversation, agent):
    provider = agent.provider
    assert selectors.chat_view(conversation).meter.context_window == 8192  # the catalogue's "demo" row
    provider.context_window = 20_000
    provider.save()
    conversation.refresh_from_db()
    assert selectors.chat_view(conversation).meter.context_window == 20_000
    ProviderModel.objects.create(provider=provider, model="DEMO", context_window=4096)
    ProviderModel.objects.create(provider=provider, model="other", context_window=1000)
    conversation.refresh_from_db()
    assert selectors.chat_view(conversation).meter.context_window == 4096
    # a conversation on another model (/model) reads that model's row
    Conversation.objects.filter(pk=conversation.pk).update(model_override="other")
    conversation.refresh_from_db()
    assert selectors.chat_view(conversation).meter.context_window == 1000


# -- tool cards ----------------------------------------------------------------------------------------
@turns
def test_tool_cards_show_the_call_its_arguments_result_and_duration(conversation, alice, sent_turns, use_redis):
    trace = answered(send(conversation, alice, "What is 12 * (7 + 5)?"))
    view = selectors.chat_view(conversation)
    parts = view.turns[0].parts
    kinds = [kind for kind, _ in parts]
    assert kinds == ["card", "text"]  # the call, then the answer written from its result
    card = parts[0][1]
    assert (card.name, card.state, card.output) == ("calculator", "ok", "144")
    assert json.loads(card.arguments) == {"expression": "12*(7+5)"}
    assert card.duration_ms is not None and card.trace_uuid == trace.uuid and not card.needs_approval


def _step(trace, seq, kind, status, *, call_id="call_1", name="calculator", meta=None, error="", args=None):
    from django.utils import timezone

    step = Step.objects.create(trace=trace, seq=seq, kind=kind, status=status, name=name, call_id=call_id,
                               started_at=timezone.now(), meta=meta or {}, error=error, duration_ms=12.5)
    if args is not None:
        StepPayload.objects.create(step=step, kind="arguments", content=json.dumps(args))
    return step


def test_an_approval_card_waits_with_a_countdown_then_shows_the_outcome(conversation, alice, sent_turns):
    trace = send(conversation, alice, "What is 2 + 3?")
    Trace.objects.filter(pk=trace.pk).update(status="running")
    _step(trace, 1, "tool_call", "running", args={"expression": "2+3"})
    approval = _step(trace, 2, "approval", "waiting", meta={"timeout_s": 300}, args={"expression": "2+3"})

    card = tool_cards.tool_card_for_step(Step.objects.select_related("trace").get(pk=approval.pk))
    assert card.state == "waiting" and card.needs_approval and 295 <= card.seconds_left <= 300
    assert card.decision_url == reverse("approval_decision", args=[trace.uuid, "call_1"])

    Step.objects.filter(pk=approval.pk).update(status="error", meta={"timeout_s": 300, "reason": "timeout"},
                                               error="Nobody decided in time, so the call was denied.")
    Step.objects.filter(trace=trace, seq=1).update(status="error", error="Denied by user.")
    card = tool_cards.tool_card_for_step(Step.objects.select_related("trace").get(pk=approval.pk))
    assert card.state == "timeout" and card.label == "Denied: no decision in time"
    assert card.error == "Nobody decided in time, so the call was denied."


def test_approve_and_deny_show_only_to_people_who_may_chat(client_for, alice, conversation, sent_turns, vera):
    trace = send(conversation, alice, "What is 2 + 3?")
    Trace.objects.filter(pk=trace.pk).update(status="running")
    _step(trace, 1, "approval", "waiting", meta={"timeout_s": 60}, args={"expression": "2+3"})
    url = reverse("conversation", args=[conversation.uuid])

    member_page = client_for(alice).get(url).content.decode()
    assert 'class="approval-actions chat-only"' in member_page and 'class="can-chat"' in member_page
    assert ">Approve</button>" in member_page and ">Deny</button>" in member_page

    assert client_for(vera).get(url).status_code == 404  # alice's conversation is private
    Conversation.objects.filter(pk=conversation.pk).update(shared=True)
    viewer_page = client_for(vera).get(url).content.decode()
    assert 'class="can-chat"' not in viewer_page  # .chat-only hides the buttons
    assert "The conversation's owner or a team admin decides." in viewer_page
    decision = reverse("approval_decision", args=[trace.uuid, "call_1"])
    assert client_for(vera).post(decision, {"approved": "1"}).status_code == 403


# -- live fragments ------------------------------------------------------------------------------------
@turns
def test_a_finished_turn_is_announced_as_data_and_the_open_page_gets_its_answer_and_meter(
        conversation, alice, sent_turns, use_redis, django_assert_num_queries):
    trace = answered(send(conversation, alice, "What is 2 + 3?"))
    Message.objects.filter(trace=trace, role="assistant").exclude(text="").update(text="**5** <script>x</script>")
    loaded = live_trace(trace)
    with django_assert_num_queries(0):  # nothing is read or rendered for nobody
        groups, event = live.trace_announcement(loaded)
    assert event["status"] == "completed" and "answer" not in event and "html" not in event
    assert f"conversation_{conversation.uuid.hex}" in groups
    payload = live.chat_payload(event)  # what the conversation's socket sends its page
    assert f'id="answer-{trace.uuid.hex}"' in payload["answer"] and "<strong>5</strong>" in payload["answer"]
    assert "&lt;script&gt;" in payload["answer"] and "<script>" not in payload["answer"]
    assert 'id="meter"' in payload["meter"] and payload["seq"] == event["seq"]


@turns
def test_a_tool_step_is_announced_as_data_and_the_open_page_gets_its_card(
        conversation, alice, sent_turns, use_redis, django_assert_num_queries):
    trace = answered(send(conversation, alice, "What is 2 + 3?"))
    step = Step.objects.get(trace=trace, kind="tool_call")
    step.trace = live_trace(trace)
    with django_assert_num_queries(0):
        _, event = live.step_announcement(step)
    assert event["kind"] == "tool_call" and "card" not in event
    payload = live.chat_payload(event)
    assert payload["card_id"].startswith(f"call-{trace.uuid.hex}-")
    assert 'class="tool-card state-ok"' in payload["card"] and "2+3" in payload["card"]
    llm = Step.objects.filter(trace=trace, kind="llm_request").first()
    llm.trace = step.trace
    _, event = live.step_announcement(llm)
    assert event["kind"] == "llm" and event["tokens"] == llm.total_tokens > 0
    assert live.chat_payload(event) == event  # a model request's figures are data already


def test_a_new_message_is_announced_with_where_it_sits(conversation, alice, sent_turns, django_capture_on_commit_callbacks):
    first = send(conversation, alice, "one")
    second = send(conversation, alice, "two")
    message = Message.objects.select_related("trace", "conversation", "parent_turn").get(pk=second.user_message_id)
    _, event = live.message_announcement(message)
    assert event["turn"] == second.uuid.hex and event["parent"] == first.uuid.hex and "html" not in event
    payload = live.chat_payload(event)
    assert f'id="answer-{second.uuid.hex}"' in payload["html"] and "two" in payload["html"]


def test_an_event_whose_row_is_gone_reaches_the_page_as_it_is(conversation, alice, sent_turns):
    trace = send(conversation, alice, "one")
    event = {"event": "step", "trace": trace.uuid.hex, "seq": 3, "step": 9, "kind": "tool_call"}
    assert live.chat_payload(event) == event
    gone = {"event": "trace", "trace": "0" * 32, "seq": 3, "status": "completed"}
    assert live.chat_payload(gone) == gone


def test_deltas_reach_the_chat_as_bare_text():
    assert live.delta_frame({"event": "delta", "step": 3, "offset": 12, "text": "Hel|lo", "seq": 9,
                             "trace": "ab"}) == "~3|12|Hel|lo"


def live_trace(trace: Trace) -> Trace:
    from traces.record.services import trace_for_live

    return trace_for_live(trace.pk)


@turns
def test_the_page_reads_each_kind_of_row_once_however_long_the_conversation(
        client_for, conversation, agent, alice, sent_turns, use_redis, django_assert_max_num_queries):
    """Who is asking (the session; the person with their teams); the conversation, its turns,
    their messages with the loose ones, the tool cards' steps with their arguments, the team's
    configuration stamp (the context window is kept with it), the last request (for the
    meter), the reader's ratings, the sidebar, the budgets with their spend: 11 for 5 turns with
    a tool call each and 9 conversations in the sidebar, so a read per turn, card or
    conversation would show."""
    from traces.models import Budget, Feedback

    for n in range(5):
        trace = answered(send(conversation, alice, f"What is {n + 12} * {n + 7}?"))
    Feedback.objects.create(team=agent.team, trace=trace, user=alice, rating=Feedback.Rating.UP)
    for n in range(8):
        services.conversation_create(agent=agent, membership=member_of(alice, agent.team), title=f"Other {n}")
    Budget.objects.create(team=agent.team, period="month", limit_usd=Decimal("5"))
    Budget.objects.create(team=agent.team, user=alice, period="day", limit_usd=Decimal("1"))
    c = client_for(alice)
    url = reverse("conversation", args=[conversation.uuid])
    c.get(url)  # the first page after signing in keeps the active team in the session
    with django_assert_max_num_queries(11):
        html = c.get(url).content.decode()
    assert html.count('class="tool-card state-ok"') == 5 and html.count('id="answer-') == 5
    assert html.count('id="side-') == 9 and 'aria-pressed="true"' in html


@turns
def test_an_ended_turn_brings_the_viewers_budget_banner_with_its_answer(conversation, alice, sent_turns,
                                                                        use_redis, django_user_model):
    # What the turn spent may cross a budget's warning threshold: the open page's banner
    # follows without a reload; it is the viewer's (a budget of bob's is not alice's).
    from traces.models import Budget, CostRollup

    trace = answered(send(conversation, alice, "What is 2 + 2?"))
    bob = django_user_model.objects.create_user("bob")
    event = {"event": "trace", "trace": trace.uuid.hex, "seq": trace.event_seq, "status": "completed"}
    assert 'class="budget-banner"' not in live.chat_payload(event, alice)["banner"]
    Budget.objects.create(team=conversation.team, user=alice, period="day", limit_usd=Decimal("1"))
    Budget.objects.create(team=conversation.team, user=bob, period="day", limit_usd=Decimal("1"))
    CostRollup.objects.create(team=conversation.team, day=timezone.localdate(), user_id=alice.pk,
                              provider="Demo", model="demo", calls=1,
                              cost_units=int(Decimal("0.9") / Decimal("1e-10")))
    banner = live.chat_payload(event, alice)["banner"]
    assert banner.startswith('<div id="budget-banner">') and "Your daily budget is 90% used" in banner
    assert 'class="budget-banner"' not in live.chat_payload(event, bob)["banner"]
    assert "banner" not in live.chat_payload(event)


@turns
def test_the_header_says_when_routing_ran_the_last_turn_on_another_model(conversation, alice, sent_turns,
                                                                         use_redis, client_for):
    trace = answered(send(conversation, alice, "What is 2 + 2?"))
    page = client_for(alice).get(reverse("conversation", args=[conversation.uuid])).content.decode()
    assert "(last turn:" not in page  # it ran on the conversation's model
    Trace.objects.filter(pk=trace.pk).update(model="demo-careful")  # where a routing rule sent it
    page = client_for(alice).get(reverse("conversation", args=[conversation.uuid])).content.decode()
    assert "(last turn: demo-careful)" in page
    event = {"event": "trace", "trace": trace.uuid.hex, "seq": trace.event_seq, "status": "completed"}
    fragment = live.chat_payload(event, alice)["model"]
    assert fragment.startswith('<span id="chat-model"') and "(last turn: demo-careful)" in fragment
