"""Fork and replay (``agents.turns.fork``): a new run from any step of a stored turn, with the
recorded tool results replayed instead of run again, on the same or another model, run in this
process on the offline demo model. The ``counter`` and ``tally`` tools count their real calls:
a replay must leave them unchanged."""

from __future__ import annotations

import pytest
from django.core.exceptions import PermissionDenied, ValidationError
from django.urls import reverse

from agents.chat.services import conversation_create
from agents.models import AgentVersion, Message, Provider, Tool
from agents.runtime.replay import REFUSED_OUTPUT
from agents.runtime.tools import FunctionTool
from agents.tools import registry
from agents.turns.approvals import approval_decide
from agents.turns.fork import fork_start
from agents.turns.lifecycle import trace_hand_back
from agents.turns.services import turn_start
from agents.turns.tasks import turn_run
from tests.agents.api.rest_keys import key_client
from tests.approvals import waiting_approval
from tests.members import member_of
from traces.debug.compare_selectors import trace_comparison
from traces.models import Step, StepPayload, Trace

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def counted(monkeypatch, make_agent):
    """An agent ("Counting") with ``counter`` and ``tally``: built-ins registered for the test
    whose every real call adds one to ``counted.calls[name]`` and answers with the count."""

    class Counted:
        calls: dict[str, int] = {}
        agent = None

    counts = Counted()
    counts.calls = {"counter": 0, "tally": 0}

    def builtin(name):
        async def run(arguments):
            counts.calls[name] += 1
            return f"{name} call number {counts.calls[name]}"

        return registry.Builtin(name, f"Counts its calls ({name}).", {"type": "object", "properties": {}},
                                lambda row, context: FunctionTool(name, f"Counts its calls ({name}).", run))

    for name in ("counter", "tally"):
        monkeypatch.setitem(registry.BUILTINS, name, builtin(name))
    agent = make_agent(name="Counting", tools=("calculator",), allowed_models=["demo-large"])
    for name in ("counter", "tally"):
        agent.tools.add(Tool.objects.create(team=agent.team, name=name, kind="builtin"))
    counts.agent = agent
    return counts


def _conversation(agent, user):
    return conversation_create(agent=agent, membership=member_of(user, agent.team))


def _finished(agent, user, text: str) -> Trace:
    trace = turn_start(conversation=_conversation(agent, user), membership=member_of(user, agent.team), text=text)
    assert turn_run(trace.pk) == "completed"
    return Trace.objects.select_related("conversation", "user_message").get(pk=trace.pk)


def _run(fork: Trace) -> Trace:
    assert turn_run(fork.pk) == "completed"
    return Trace.objects.get(pk=fork.pk)


def _tools(trace: Trace) -> list[tuple[str, bool, dict]]:
    return [(s.name, s.success, s.meta) for s in trace.steps.filter(kind="tool_call").order_by("seq")]


def _output(step: Step) -> str:
    return StepPayload.objects.get(step=step, kind="output").content


# -- each kind of fork point --------------------------------------------------------------------------
def test_a_fork_at_a_model_request_sends_it_again_and_replays_the_later_call(
        counted, alice, sent_turns, use_redis):
    parent = _finished(counted.agent, alice, "call the counter tool 2 times")
    assert counted.calls["counter"] == 2
    second_request = parent.steps.filter(kind="llm_request").order_by("seq")[1]

    fork = fork_start(trace=parent, seq=second_request.seq, membership=member_of(alice, parent))
    assert sent_turns[-1] == fork.pk
    fork = _run(fork)

    assert counted.calls["counter"] == 2  # nothing ran again
    assert fork.answer == parent.answer == "Called counter 2 times."
    steps = list(fork.steps.order_by("seq"))
    assert steps[0].kind == "resume" and steps[0].name == f"forked from {parent.uuid.hex[:8]} at step 3"
    # one model request for the iteration it sent again, one replayed call, the final request
    assert [s.kind for s in steps[1:]] == ["llm_request", "tool_call", "llm_request"]
    assert steps[1].iteration == 2 and steps[2].meta["replayed"] is True
    later_call = parent.steps.filter(kind="tool_call").order_by("seq")[1]
    assert steps[2].meta["recorded_seq"] == later_call.seq
    assert _output(steps[2]) == _output(later_call) == "counter call number 2"
    # the fork's messages: the copied answer and result, then its own
    rows = list(Message.objects.filter(conversation=fork.conversation).order_by("id"))
    assert [m.role for m in rows] == ["user", "assistant", "tool", "assistant", "tool", "assistant"]
    # costs are the fork's own requests only
    assert fork.step_count == 4 and fork.iterations == 3
    assert fork.input_tokens == sum(s.input_tokens for s in steps if s.kind == "llm_request") > 0


def test_a_fork_at_a_tool_call_makes_the_call_again_from_the_record(
        counted, alice, sent_turns, use_redis):
    parent = _finished(counted.agent, alice, "call the counter tool 2 times")
    first_call = parent.steps.filter(kind="tool_call").order_by("seq").first()

    fork = _run(fork_start(trace=parent, seq=first_call.seq, membership=member_of(alice, parent)))

    assert counted.calls["counter"] == 2
    tools = _tools(fork)
    assert [(name, ok, meta["replayed"]) for name, ok, meta in tools] == [
        ("counter", True, True), ("counter", True, True)]
    assert [m["recorded_seq"] for _, _, m in tools] == [
        s.seq for s in parent.steps.filter(kind="tool_call").order_by("seq")]
    # the model answer that made the call was copied, not asked for again
    assert fork.steps.filter(kind="llm_request").count() == 2
    assert fork.answer == "Called counter 2 times."


def test_a_fork_at_an_approval_replays_the_approved_call_without_asking_again(
        counted, alice, sent_turns, use_redis, run_in_thread):
    Tool.objects.filter(team=counted.agent.team, name="counter").update(policy="ask")
    trace = turn_start(conversation=_conversation(counted.agent, alice), membership=member_of(alice, counted.agent.team),
                       text="call the counter tool 1 times")
    worker = run_in_thread(trace.pk)
    waiting = waiting_approval(trace)
    approval_decide(trace=trace, call_id=waiting.call_id, approved=True, membership=member_of(alice, trace))
    worker.join(timeout=10)
    assert worker.result == "completed" and counted.calls["counter"] == 1
    parent = Trace.objects.get(pk=trace.pk)

    fork = _run(fork_start(trace=parent, seq=waiting.seq, membership=member_of(alice, parent)))

    assert counted.calls["counter"] == 1
    assert not fork.steps.filter(kind="approval").exists()
    [(name, ok, meta)] = _tools(fork)
    assert (name, ok, meta["replayed"], meta["permission"]["outcome"]) == ("counter", True, True, "allow")
    assert fork.answer == "Called counter 1 times."


# -- calls that were not recorded -----------------------------------------------------------------------
def test_a_call_that_was_not_recorded_is_refused_with_a_clear_result(counted, alice, sent_turns, use_redis):
    parent = _finished(counted.agent, alice, "call the counter tool 1 times")
    first_request = parent.steps.get(kind="llm_request", iteration=1)

    fork = _run(fork_start(trace=parent, seq=first_request.seq, membership=member_of(alice, parent),
                           message="call the tally tool 1 times"))

    assert counted.calls == {"counter": 1, "tally": 0}
    [step] = fork.steps.filter(kind="tool_call")
    assert (step.name, step.success, step.meta["replay_refused"]) == ("tally", False, True)
    assert _output(step) == f"Error: {REFUSED_OUTPUT}"
    assert fork.user_message.text == "call the tally tool 1 times"
    assert fork.meta["fork"]["message"] == "call the tally tool 1 times"
    # the original's message is untouched
    assert Trace.objects.get(pk=parent.pk).user_message.text == "call the counter tool 1 times"


def test_a_recorded_call_made_more_often_than_recorded_gets_the_last_recorded_result(
        counted, alice, sent_turns, use_redis):
    parent = _finished(counted.agent, alice, "call the tally tool 1 times")
    first_request = parent.steps.get(kind="llm_request", iteration=1)

    fork = _run(fork_start(trace=parent, seq=first_request.seq, membership=member_of(alice, parent),
                           message="call the tally tool 2 times", allow_new_tool_calls=True))

    # same tool, same arguments: a recorded call, so nothing runs even with new calls allowed
    assert counted.calls["tally"] == 1
    assert [meta.get("replayed") for _, _, meta in _tools(fork)] == [True, True]
    assert fork.answer == "Called tally 2 times."


def test_an_allowed_new_call_runs_for_real(counted, alice, sent_turns, use_redis):
    parent = _finished(counted.agent, alice, "call the counter tool 1 times")
    first_request = parent.steps.get(kind="llm_request", iteration=1)

    fork = _run(fork_start(trace=parent, seq=first_request.seq, membership=member_of(alice, parent),
                           message="call the tally tool 1 times", allow_new_tool_calls=True))

    assert counted.calls == {"counter": 1, "tally": 1}
    [(name, ok, meta)] = _tools(fork)
    assert (name, ok, meta["replay_new_call"]) == ("tally", True, True)
    assert fork.answer == "Called tally 1 times."


def test_a_fork_of_a_long_turn_replays_every_later_call_from_the_record_in_order(
        counted, alice, sent_turns, use_redis):
    # More calls after the fork point than the first page of the record holds.
    type(counted.agent).objects.filter(pk=counted.agent.pk).update(max_tool_iterations=100)
    counted.agent.refresh_from_db()
    parent = _finished(counted.agent, alice, "call the counter tool 90 times")
    assert counted.calls["counter"] == 90
    first_call = parent.steps.filter(kind="tool_call").order_by("seq").first()

    fork = _run(fork_start(trace=parent, seq=first_call.seq, membership=member_of(alice, parent)))

    assert counted.calls["counter"] == 90  # nothing ran again
    tools = _tools(fork)
    assert len(tools) == 90 and all(meta["replayed"] for _, _, meta in tools)
    assert [m["recorded_seq"] for _, _, m in tools] == list(
        parent.steps.filter(kind="tool_call").order_by("seq").values_list("seq", flat=True))
    assert fork.answer == parent.answer == "Called counter 90 times."


# -- another model, provider, version, prompt -------------------------------------------------------------
def test_a_fork_runs_on_another_model_of_the_agent(counted, alice, sent_turns, use_redis):
    parent = _finished(counted.agent, alice, "call the counter tool 2 times")
    second_request = parent.steps.filter(kind="llm_request").order_by("seq")[1]

    fork = _run(fork_start(trace=parent, seq=second_request.seq, membership=member_of(alice, parent), model="demo-large"))

    assert fork.model == "demo-large" and parent.model == "demo"
    assert set(fork.steps.filter(kind="llm_request").values_list("model", flat=True)) == {"demo-large"}
    assert fork.routing["reason"].startswith("The fork runs on")
    assert counted.calls["counter"] == 2


def test_a_fork_runs_on_another_provider_of_the_team(counted, alice, sent_turns, use_redis):
    other = Provider.objects.create(team=counted.agent.team, name="Second demo", kind="demo")
    parent = _finished(counted.agent, alice, "What is 6 * 7?")

    fork = _run(fork_start(trace=parent, seq=1, membership=member_of(alice, parent), provider=other.name, model="demo-two"))

    assert (fork.provider_name, fork.model) == ("Second demo", "demo-two")
    assert fork.answer == parent.answer
    [(name, ok, meta)] = _tools(fork)
    assert name == "calculator" and meta["replayed"]


def test_a_model_the_agent_may_not_use_or_an_unknown_provider_is_refused(counted, alice, sent_turns, use_redis):
    parent = _finished(counted.agent, alice, "What is 6 * 7?")
    with pytest.raises(ValidationError, match="may use demo, demo-large"):
        fork_start(trace=parent, seq=1, membership=member_of(alice, parent), model="gpt-9")
    with pytest.raises(ValidationError, match="no provider named"):
        fork_start(trace=parent, seq=1, membership=member_of(alice, parent), provider="Nowhere")
    with pytest.raises(ValidationError, match="no step 99"):
        fork_start(trace=parent, seq=99, membership=member_of(alice, parent))


def test_a_fork_uses_an_edited_system_prompt_and_another_agent_version(counted, alice, sent_turns, use_redis):
    agent = counted.agent
    AgentVersion.objects.create(agent=agent, number=7, snapshot={
        "system_prompt": "You are version seven.", "max_tool_iterations": 3, "tools": ["calculator"]})
    parent = _finished(agent, alice, "What is 6 * 7?")

    fork = _run(fork_start(trace=parent, seq=1, membership=member_of(alice, parent), agent_version=7))
    edited = _run(fork_start(trace=parent, seq=1, membership=member_of(alice, parent), system_prompt="Answer in French."))

    assert fork.agent_version == 7 and fork.meta["fork"]["agent_version"] == 7
    request = StepPayload.objects.get(step__trace=fork, step__kind="llm_request", step__iteration=1,
                                      kind="request").content
    assert "You are version seven." in request
    assert "Answer in French." in StepPayload.objects.get(
        step__trace=edited, step__kind="llm_request", step__iteration=1, kind="request").content
    # the version's tools only
    assert fork.steps.filter(kind="llm_request").first().meta["tools_available"] == ["calculator"]


def test_a_versions_tools_are_offered_even_those_the_agent_has_dropped_since(
        counted, alice, sent_turns, use_redis):
    """The version had counter, tally and a tool the team has deleted since; the agent has
    dropped tally. The fork offers counter and tally (tally runs from the record), and says
    which of the version's tools is gone."""
    agent = counted.agent
    parent = _finished(agent, alice, "call the tally tool 1 times")
    AgentVersion.objects.create(agent=agent, number=8, snapshot={"tools": ["counter", "tally", "gone_tool"]})
    agent.tools.remove(Tool.objects.get(team=agent.team, name="tally"))

    fork = _run(fork_start(trace=parent, seq=1, membership=member_of(alice, parent), agent_version=8))

    assert fork.steps.filter(kind="llm_request").first().meta["tools_available"] == ["counter", "tally"]
    [(name, ok, meta)] = _tools(fork)
    assert (name, ok, meta["replayed"]) == ("tally", True, True) and counted.calls["tally"] == 1
    assert any("gone_tool" in w and "tally" not in w for w in fork.meta["warnings"])
    # an ordinary turn of the agent no longer has tally
    later = _finished(agent, alice, "What is 6 * 7?")
    assert "tally" not in later.steps.filter(kind="llm_request").first().meta["tools_available"]


# -- links, history, access ----------------------------------------------------------------------------------
def test_the_fork_links_to_its_parent_and_leaves_the_original_conversation_alone(
        counted, alice, sent_turns, use_redis):
    first = _finished(counted.agent, alice, "What is 6 * 7?")
    parent = turn_start(conversation=first.conversation, membership=member_of(alice, first.conversation), text="call the counter tool 1 times")
    turn_run(parent.pk)
    parent = Trace.objects.get(pk=parent.pk)
    before = list(Message.objects.filter(conversation=first.conversation).values_list("pk", "text"))

    fork = _run(fork_start(trace=parent, seq=1, membership=member_of(alice, parent)))

    assert (fork.forked_from_id, fork.fork_seq) == (parent.pk, 1)
    assert list(parent.forks.all()) == [fork]
    assert fork.conversation_id != parent.conversation_id and fork.conversation.ephemeral
    assert fork.team_id == parent.team_id and fork.user == alice
    assert list(Message.objects.filter(conversation=first.conversation).values_list("pk", "text")) == before
    # the fork's history holds the earlier turn of the branch
    texts = list(Message.objects.filter(conversation=fork.conversation).order_by("id")
                 .values_list("role", "text"))
    assert texts[0] == ("user", "What is 6 * 7?") and ("user", "call the counter tool 1 times") in texts
    assert fork.answer == "Called counter 1 times." and counted.calls["counter"] == 1


def test_a_running_turn_or_a_step_of_another_kind_cannot_be_forked(counted, alice, sent_turns, use_redis):
    parent = _finished(counted.agent, alice, "What is 6 * 7?")
    Step.objects.create(trace=parent, seq=50, kind="retry", started_at=parent.created_at)
    with pytest.raises(ValidationError, match="model request, a tool call or an approval"):
        fork_start(trace=parent, seq=50, membership=member_of(alice, parent))
    Trace.objects.filter(pk=parent.pk).update(status="running")
    with pytest.raises(ValidationError, match="still running"):
        fork_start(trace=Trace.objects.get(pk=parent.pk), seq=1, membership=member_of(alice, parent))


def test_only_those_who_may_act_in_the_conversation_fork(counted, alice, bob, vera, sent_turns, use_redis):
    parent = _finished(counted.agent, alice, "What is 6 * 7?")
    for person in (bob, vera):
        with pytest.raises(PermissionDenied):
            fork_start(trace=parent, seq=1, membership=member_of(person, parent))


def test_a_forked_run_resumed_after_its_worker_died_keeps_the_parent_record(
        counted, alice, sent_turns, use_redis):

    parent = _finished(counted.agent, alice, "call the counter tool 2 times")
    second_request = parent.steps.filter(kind="llm_request").order_by("seq")[1]
    fork = _run(fork_start(trace=parent, seq=second_request.seq, membership=member_of(alice, parent)))
    # as it was when its worker died: its own model request answered, its call running
    call = fork.steps.get(kind="tool_call")
    fork.steps.filter(seq__gt=call.seq).delete()
    Step.objects.filter(pk=call.pk).update(status="running", success=None)
    StepPayload.objects.filter(step=call, kind="output").delete()
    Message.objects.filter(trace=fork).exclude(role="user").delete()
    Trace.objects.filter(pk=fork.pk).update(status="running", finished_at=None, answer="",
                                            worker="dead@host")
    assert trace_hand_back(trace_id=fork.pk, attempt=1, reason="worker_lost")

    fork = _run(fork)

    assert fork.attempts == 2 and fork.answer == "Called counter 2 times."
    assert counted.calls["counter"] == 2
    # its messages: the parent's copied answer and result, its own answer, the call, the end
    rows = list(Message.objects.filter(trace=fork).order_by("id").values_list("role", flat=True))
    assert rows == ["user", "assistant", "tool", "assistant", "tool", "assistant"]
    assert fork.steps.filter(kind="resume").count() == 2


# -- the inspector's form and the API ----------------------------------------------------------------------
def test_each_step_of_the_kinds_one_can_fork_from_has_a_fork_link(counted, alice, client_for, sent_turns, use_redis):
    parent = _finished(counted.agent, alice, "What is 6 * 7?")
    client = client_for(alice)
    for step in parent.steps.all():
        page = client.get(f"/traces/{parent.uuid}/steps/{step.seq}/").content.decode()
        assert (f"/traces/{parent.uuid}/fork/{step.seq}/" in page) == (
            step.kind in ("llm_request", "tool_call", "approval"))


def test_the_fork_form_starts_the_fork_and_the_new_trace_names_its_parent(
        counted, alice, client_for, sent_turns, use_redis):
    parent = _finished(counted.agent, alice, "call the counter tool 2 times")
    second = parent.steps.filter(kind="llm_request").order_by("seq")[1]
    client = client_for(alice)

    form = client.get(f"/traces/{parent.uuid}/fork/{second.seq}/")
    assert form.status_code == 200
    page = form.content.decode()
    assert "demo-large" in page and "Run tool calls that were not recorded" in page

    response = client.post(f"/traces/{parent.uuid}/fork/{second.seq}/",
                           {"model": "demo-large", "message": "call the counter tool 2 times"})
    fork = Trace.objects.get(forked_from=parent)
    assert response.status_code == 302 and response["Location"] == f"/traces/{fork.uuid}/"
    assert fork.meta["fork"] == {"upto_seq": second.seq - 1, "allow_new_tool_calls": False,
                                 "model": "demo-large"}
    _run(fork)

    page = client.get(f"/traces/{fork.uuid}/").content.decode()
    assert f"Forked from <a href=\"/traces/{parent.uuid}/#step-{second.seq}\"" in page
    assert f"at step {second.seq}" in page
    parent_page = client.get(f"/traces/{parent.uuid}/").content.decode()
    assert f"/traces/{fork.uuid}/" in parent_page and "Forks:" in parent_page


def test_the_fork_form_says_what_is_wrong(counted, alice, client_for, sent_turns, use_redis):
    parent = _finished(counted.agent, alice, "What is 6 * 7?")
    response = client_for(alice).post(f"/traces/{parent.uuid}/fork/1/", {"model": "gpt-9"})
    assert response.status_code == 400 and "may use demo, demo-large" in response.content.decode()
    assert not Trace.objects.filter(forked_from=parent).exists()


def test_another_team_cannot_see_or_fork_a_trace(counted, alice, charlie, vera, client_for, sent_turns, use_redis):
    parent = _finished(counted.agent, alice, "What is 6 * 7?")
    outsider = client_for(charlie)
    assert outsider.get(f"/traces/{parent.uuid}/fork/1/").status_code == 404
    assert outsider.post(f"/traces/{parent.uuid}/fork/1/", {}).status_code == 404
    assert client_for(vera).post(f"/traces/{parent.uuid}/fork/1/", {}).status_code == 403
    assert not Trace.objects.filter(forked_from=parent).exists()


def test_the_api_forks_a_trace_and_returns_the_new_id(counted, alice, charlie, team_b, sent_turns, use_redis):
    parent = _finished(counted.agent, alice, "call the counter tool 2 times")
    second = parent.steps.filter(kind="llm_request").order_by("seq")[1]
    client = key_client(alice, counted.agent.team)

    response = client.post(f"/api/v1/traces/{parent.uuid.hex}/fork",
                           {"seq": second.seq, "model": "demo-large"}, content_type="application/json")

    assert response.status_code == 202, response.content
    body = response.json()
    fork = Trace.objects.get(uuid=body["id"])
    assert (fork.forked_from_id, fork.fork_seq, body["forked_from"]) == (parent.pk, second.seq, str(parent.uuid))
    assert _run(fork).model == "demo-large" and counted.calls["counter"] == 2
    bad = client.post(f"/api/v1/traces/{parent.uuid.hex}/fork", {"seq": 1, "model": "gpt-9"},
                      content_type="application/json")
    assert bad.status_code == 400 and "may use" in bad.json()["error"]["message"]
    # another team: 404; a key without the chat scope: 403
    outsider = key_client(charlie, team_b)
    assert outsider.post(f"/api/v1/traces/{parent.uuid.hex}/fork", {"seq": 1},
                         content_type="application/json").status_code == 404
    reader = key_client(alice, counted.agent.team, scopes=("traces:read",))
    assert reader.post(f"/api/v1/traces/{parent.uuid.hex}/fork", {"seq": 1},
                       content_type="application/json").status_code == 403


def test_a_fork_compared_with_its_parent_is_compared_from_the_fork_point(
        counted, alice, client_for, sent_turns, use_redis):
    """Replayed at the same model, the fork does what its parent did from the fork point on:
    no divergence, although its record starts there; on another model, the request differs."""
    parent = _finished(counted.agent, alice, "call the counter tool 2 times")
    second_request = parent.steps.filter(kind="llm_request").order_by("seq")[1]
    same = _run(fork_start(trace=parent, seq=second_request.seq, membership=member_of(alice, parent)))
    other = _run(fork_start(trace=parent, seq=second_request.seq, membership=member_of(alice, parent), model="demo-large"))

    comparison = trace_comparison(parent, same)
    assert comparison.divergence is None
    assert [p.a.seq for p in comparison.pairs if p.a] == [3, 4, 5]
    assert comparison.divergence is None and trace_comparison(same, parent).divergence is None
    assert trace_comparison(parent, other).divergence.position == 1

    page = client_for(alice).get(reverse("trace_compare"), {"a": parent.uuid, "b": same.uuid})
    html = page.content.decode()
    assert "Run B is a fork of run A at step 3" in html and "No divergence" in html
    inspector = client_for(alice).get(reverse("trace_detail", args=[same.uuid])).content.decode()
    assert f"?a={parent.uuid}&amp;b={same.uuid}" in inspector


def test_a_forks_totals_are_whole_run_figures_like_its_steps_and_tokens(
        counted, alice, client_for, sent_turns, use_redis):
    # Forked at its last model request, the parent is compared from there on: its model
    # requests and tool calls are still counted over its whole run, as its steps and tokens are.
    parent = _finished(counted.agent, alice, "call the counter tool 2 times")
    last_request = parent.steps.filter(kind="llm_request").order_by("seq").last()
    fork = _run(fork_start(trace=parent, seq=last_request.seq, membership=member_of(alice, parent)))
    totals = {row.key: (row.a, row.b) for row in trace_comparison(parent, fork).totals}
    assert totals["model_requests"] == (3, 1) and totals["tool_calls"] == (2, 0)
    assert totals["steps"] == (parent.step_count, fork.step_count)
    tools = {row.key: (row.a, row.b) for row in trace_comparison(parent, fork).tools}
    assert tools == {"counter": (2, 0)}
    page = client_for(alice).get(reverse("trace_compare"), {"a": parent.uuid, "b": fork.uuid})
    assert "Neither run called a tool" not in page.content.decode()


def test_a_fork_with_an_edited_message_diverges_at_its_first_request_and_says_how(
        counted, alice, sent_turns, use_redis):
    """The edited message is part of what the fork's first request sends: the comparison names
    that message, at whichever step the fork starts."""
    parent = _finished(counted.agent, alice, "call the counter tool 2 times")
    first, second = parent.steps.filter(kind="llm_request").order_by("seq")[:2]
    for step in (first, second):
        fork = _run(fork_start(trace=parent, seq=step.seq, membership=member_of(alice, parent),
                               message="call the counter tool 2 times, please"))

        divergence = trace_comparison(parent, fork).divergence
        assert (divergence.position, divergence.a_seq, divergence.what) == (1, step.seq, "request")
        assert divergence.detail == ("the request differs: message 1 (user): '…counter tool 2 times' "
                                     "vs '…counter tool 2 times, please'")


def test_a_fork_on_another_model_with_an_edited_message_names_both(counted, alice, sent_turns, use_redis):
    parent = _finished(counted.agent, alice, "call the counter tool 2 times")
    second = parent.steps.filter(kind="llm_request").order_by("seq")[1]
    both = _run(fork_start(trace=parent, seq=second.seq, membership=member_of(alice, parent), model="demo-large",
                           message="call the counter tool 2 times, please"))
    only_model = _run(fork_start(trace=parent, seq=second.seq, membership=member_of(alice, parent), model="demo-large"))

    divergence = trace_comparison(parent, both).divergence
    assert divergence.what == "model"
    assert divergence.detail == ("model 'demo' on Demo for Counting vs 'demo-large' on Demo for Counting; "
                                 "the request differs too: message 1 (user): '…counter tool 2 times' "
                                 "vs '…counter tool 2 times, please'")
    assert trace_comparison(parent, only_model).divergence.detail == (
        "model 'demo' on Demo for Counting vs 'demo-large' on Demo for Counting")
