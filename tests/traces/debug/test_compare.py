"""Comparing two runs: alignment, the first divergence in plain words, totals, the answers'
diff, the page (privacy, escaping, folding of long runs) and the REST endpoint."""

from __future__ import annotations

import html
import json
from datetime import timedelta
from decimal import Decimal

import pytest
from django.urls import reverse
from django.utils import timezone

from agents.chat.services import conversation_create
from agents.turns.services import turn_start
from agents.turns.tasks import turn_run
from tests.agents.api.rest_keys import key_client
from tests.members import member_of
from traces.debug import compare
from traces.debug.compare import Pair, StepFacts
from traces.debug.compare_selectors import trace_comparison
from traces.models import Step, StepPayload, Trace


def compare_url(a: Trace, b: Trace, **extra: str) -> str:
    query = "&".join(f"{k}={v}" for k, v in {"a": a.uuid, "b": b.uuid, **extra}.items())
    return f"{reverse('trace_compare')}?{query}"


def request_payload(text: str, *, stamp: str = "2026-01-05 10:00:00 UTC") -> dict:
    return {"model": "demo", "system": [{"text": f"## Current Date & Time\n\n{stamp} (Monday)"}],
            "tools": ["calculator"], "message_offset": 0,
            "messages": [{"role": "user", "blocks": [{"type": "text", "text": f"[{stamp}] {text}"}]}]}


def message_payload(*, text: str = "", call: dict | None = None, usage: int = 10) -> dict:
    blocks = [{"type": "text", "text": text}] if text else []
    if call:
        blocks.append({"type": "tool_use", "id": f"call_{usage}", "name": "calculator", "input": call})
    return {"role": "assistant", "blocks": blocks, "usage": {"input_tokens": usage, "output_tokens": 3}}


def build(conversation, user, steps: list[tuple], *, answer: str = "42") -> Trace:
    """A completed trace of the given steps: ("llm", request, message) or ("tool", name,
    arguments, output)."""
    now = timezone.now()
    trace = Trace.objects.create(
        team=conversation.team, conversation=conversation, agent=conversation.agent, user=user,
        status=Trace.Status.COMPLETED, model="demo", provider_name="Demo", started_at=now, finished_at=now,
        duration_ms=100 * len(steps), iterations=sum(1 for s in steps if s[0] == "llm"), step_count=len(steps),
        input_tokens=10 * len(steps), output_tokens=3 * len(steps), cost_usd=Decimal("0.01"), answer=answer)
    for seq, spec in enumerate(steps, start=1):
        if spec[0] == "llm":
            step = Step.objects.create(trace=trace, seq=seq, kind=Step.Kind.LLM_REQUEST, model="demo",
                                       provider="Demo", status="ok", started_at=now + timedelta(milliseconds=seq),
                                       input_tokens=10, output_tokens=3, cost_usd=Decimal("0.001"))
            contents = {"request": json.dumps(spec[1]), "message": json.dumps(spec[2]),
                        "response": json.dumps({"message": spec[2], "id": f"resp-{trace.pk}-{seq}"})}
        else:
            step = Step.objects.create(trace=trace, seq=seq, kind=Step.Kind.TOOL_CALL, name=spec[1], status="ok",
                                       success=True, call_id=f"call_{seq}",
                                       started_at=now + timedelta(milliseconds=seq))
            contents = {"arguments": json.dumps(spec[2]), "output": spec[3]}
        for kind, content in contents.items():
            StepPayload.objects.create(step=step, kind=kind, content=content, size=len(content),
                                       content_type="text/plain" if kind == "output" else "application/json")
    return trace


def calculator_run(expressions: list[str], *, question: str = "Compute things", answer: str = "Done.",
                   last_text: str | None = None) -> list[tuple]:
    steps: list[tuple] = [("llm", request_payload(question), message_payload(call={"expression": expressions[0]}))]
    for k, expression in enumerate(expressions):
        steps.append(("tool", "calculator", {"expression": expression}, str(eval(expression))))  # noqa: S307
        following = expressions[k + 1] if k + 1 < len(expressions) else None
        message = (message_payload(call={"expression": following}) if following
                   else message_payload(text=last_text or answer))
        steps.append(("llm", request_payload(question), message))
    return steps


def run_turn(agent, user, text: str) -> Trace:
    conversation = conversation_create(agent=agent, membership=member_of(user, agent.team))
    trace = turn_start(conversation=conversation, membership=member_of(user, conversation), text=text)
    assert turn_run(trace.pk) == "completed"
    trace.refresh_from_db()
    return trace


# -- real turns on the demo model -------------------------------------------------------------------
@pytest.mark.django_db(transaction=True)
def test_identical_runs_have_no_divergence(agent, alice, sent_turns, use_redis, client_for):
    a = run_turn(agent, alice, "What is 6 * 7?")
    b = run_turn(agent, alice, "What is 6 * 7?")

    result = trace_comparison(a, b)
    assert result.divergence is None
    assert {p.state for p in result.pairs} == {"same"} and len(result.pairs) == a.step_count == 3
    assert result.answers_same and a.answer == "6 × 7 = 42."

    page = client_for(alice).get(compare_url(a, b))
    assert page.status_code == 200
    assert "No divergence" in page.content.decode()


@pytest.mark.django_db(transaction=True)
def test_runs_asked_different_questions_differ_at_step_1(agent, alice, sent_turns, use_redis, client_for):
    a = run_turn(agent, alice, "What is 6 * 7?")
    b = run_turn(agent, alice, "What is 6 * 8?")

    result = trace_comparison(a, b)
    assert result.divergence is not None
    assert (result.divergence.position, result.divergence.what) == (1, "request")
    summary = result.divergence.summary
    assert summary.startswith("Step 1: model request demo — the request differs: message 1 (user)")
    assert "6 * 7?" in summary and "6 * 8?" in summary
    # the same tool was called once by each, and the answers differ word by word
    assert [(r.label, r.a, r.b) for r in result.tools] == [("calculator", 1, 1)]
    assert ("delete", "42.") in result.answer_diff and ("insert", "48.") in result.answer_diff

    body = client_for(alice).get(compare_url(a, b)).content.decode()
    assert 'href="#pair-1"' in body and 'id="pair-1"' in body
    assert "the request differs" in body


# -- built traces -----------------------------------------------------------------------------------
@pytest.mark.django_db
def test_runs_that_differ_in_a_tool_calls_arguments_diverge_at_that_step(conversation, alice, client_for):
    a = build(conversation, alice, calculator_run(["2+2", "6*7", "1+1"]))
    b = build(conversation, alice, calculator_run(["2+2", "6*8", "1+1"]))

    result = trace_comparison(a, b)
    d = result.divergence
    # step 3 (the model request that chose the call) already differs in what it answered
    assert (d.position, d.what) == (3, "message")
    assert d.summary == ("Step 3: model request demo — the answer differs: the model called "
                         "calculator(expression='6*7') in run A, calculator(expression='6*8') in run B")
    assert [p.state for p in result.pairs[:2]] == ["same", "same"]


@pytest.mark.django_db
def test_arguments_that_differ_are_named_with_both_values(conversation, alice):
    steps_a = calculator_run(["2+2", "6*7"])
    steps_b = calculator_run(["2+2", "6*7"])
    steps_b[3] = ("tool", "calculator", {"expression": "6*8"}, "42")
    a = build(conversation, alice, steps_a)
    b = build(conversation, alice, steps_b)

    d = trace_comparison(a, b).divergence
    assert d.summary == "Step 4: tool call calculator — arguments differ: expression '6*7' vs '6*8'"
    assert (d.a_seq, d.b_seq, d.what) == (4, 4, "arguments")


@pytest.mark.django_db
def test_a_tool_result_that_differs_is_the_divergence(conversation, alice):
    steps_b = calculator_run(["2+2", "6*7"])
    steps_b[3] = ("tool", "calculator", {"expression": "6*7"}, "41")
    d = trace_comparison(build(conversation, alice, calculator_run(["2+2", "6*7"])),
                         build(conversation, alice, steps_b)).divergence
    assert d.summary == "Step 4: tool call calculator — results differ: '42' vs '41'"


@pytest.mark.django_db
def test_runs_that_differ_only_in_the_final_answer(conversation, alice, client_for):
    a = build(conversation, alice, calculator_run(["6*7"], last_text="It is 42."), answer="It is 42.")
    b = build(conversation, alice, calculator_run(["6*7"], last_text="It is forty-two."), answer="It is forty-two.")

    result = trace_comparison(a, b)
    assert result.divergence.summary == "Step 3: model request demo — the answer differs: '…It is 42.' vs '…It is forty-two.'" or (
        result.divergence.summary == "Step 3: model request demo — the answer differs: 'It is 42.' vs 'It is forty-two.'")
    assert result.answer_diff == [("equal", "It is "), ("delete", "42."), ("insert", "forty-two.")]
    body = client_for(alice).get(compare_url(a, b)).content.decode()
    assert "<del>42.</del><ins>forty-two.</ins>" in body


@pytest.mark.django_db
def test_same_steps_with_other_answers_have_no_step_divergence(conversation, alice, client_for):
    a = build(conversation, alice, calculator_run(["6*7"]), answer="42")
    b = build(conversation, alice, calculator_run(["6*7"]), answer="forty-two")
    result = trace_comparison(a, b)
    assert result.divergence is None and not result.answers_same
    assert "Only their final answers differ" in client_for(alice).get(compare_url(a, b)).content.decode()


@pytest.mark.django_db
def test_an_extra_tool_call_is_a_step_on_one_side_only(conversation, alice):
    steps_a = calculator_run(["6*7"])
    steps_b = [*steps_a[:2], ("tool", "current_time", {}, "10:00"), *steps_a[2:]]
    result = trace_comparison(build(conversation, alice, steps_a), build(conversation, alice, steps_b))
    assert [p.state for p in result.pairs] == ["same", "same", "b_only", "matched"]
    assert result.divergence.summary == ("Step — of run A / 3 of run B: only run B has a tool call "
                                         "current_time here (#3)")
    assert {r.label: (r.a, r.b) for r in result.totals}["Tool calls"] == (1, 2)


@pytest.mark.django_db
def test_ids_usage_and_time_stamps_do_not_count_as_differences(conversation, alice):
    steps_b = calculator_run(["6*7"])
    steps_b[0] = ("llm", request_payload("Compute things", stamp="2026-02-09 23:59:59 UTC"),
                  message_payload(call={"expression": "6*7"}, usage=99))
    result = trace_comparison(build(conversation, alice, calculator_run(["6*7"])), build(conversation, alice, steps_b))
    assert result.divergence is None


@pytest.mark.django_db
def test_totals_are_side_by_side_with_their_difference(conversation, alice, client_for):
    a = build(conversation, alice, calculator_run(["6*7"]))
    b = build(conversation, alice, calculator_run(["6*7", "1+1"]))
    totals = {r.key: (r.a, r.b, r.difference, r.differs) for r in trace_comparison(a, b).totals}
    assert totals["iterations"] == (2, 3, 1, True)
    assert totals["input_tokens"] == (30, 50, 20, True)
    assert totals["cost_usd"] == (Decimal("0.01"), Decimal("0.01"), Decimal(0), False)
    body = client_for(alice).get(compare_url(a, b)).content.decode()
    assert '<tr class="differs"><th scope="row">Iterations</th><td class="num">2</td><td class="num">3</td><td class="num">+1</td></tr>' in body


# -- the page ---------------------------------------------------------------------------------------
@pytest.mark.django_db
def test_another_teams_trace_is_a_404(conversation, alice, charlie, make_agent, team_b, client_for):
    mine = build(conversation, alice, calculator_run(["6*7"]))
    other_agent = make_agent(name="Theirs", team=team_b)
    theirs = build(conversation_create(agent=other_agent, membership=member_of(charlie, team_b)), charlie,
                   calculator_run(["6*7"]))
    assert client_for(alice).get(compare_url(mine, theirs)).status_code == 404
    assert client_for(charlie).get(compare_url(mine, theirs)).status_code == 404
    assert client_for(charlie).get(compare_url(theirs, theirs)).status_code == 200


@pytest.mark.django_db
def test_a_members_private_trace_is_a_404_for_another_member(conversation, alice, bob, agent, client_for):
    alices = build(conversation, alice, calculator_run(["6*7"]))
    bobs = build(conversation_create(agent=agent, membership=member_of(bob, agent.team)), bob, calculator_run(["6*7"]))
    assert client_for(bob).get(compare_url(bobs, alices)).status_code == 404
    # an owner sees every trace of the team
    assert client_for(alice).get(compare_url(bobs, alices)).status_code == 200


@pytest.mark.django_db
def test_hostile_answers_and_outputs_are_escaped(conversation, alice, client_for):
    hostile = '<script>alert("x")</script><img src=x onerror=alert(1)>'
    steps_b = calculator_run(["6*7"])
    steps_b[1] = ("tool", "calculator", {"expression": "6*7"}, hostile)
    a = build(conversation, alice, calculator_run(["6*7"]), answer="Fine")
    b = build(conversation, alice, steps_b, answer=hostile)
    body = client_for(alice).get(compare_url(a, b)).content.decode()
    assert "<script>alert" not in body and "<img src=x" not in body
    assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;" in body


@pytest.mark.django_db
def test_without_two_ids_the_page_asks_for_them(alice, client_for):
    client = client_for(alice)
    page = client.get(reverse("trace_compare"))
    assert page.status_code == 200 and 'name="b"' in page.content.decode()
    assert client.get(reverse("trace_compare") + "?a=nope&b=").status_code == 400


@pytest.mark.django_db
def test_an_inspector_address_is_accepted_for_a_trace_id(conversation, alice, client_for):
    a = build(conversation, alice, calculator_run(["6*7"]))
    b = build(conversation, alice, calculator_run(["6*7"]))
    url = f"{reverse('trace_compare')}?a={a.uuid}&b=http://example.test/traces/{b.uuid.hex}/"
    assert client_for(alice).get(url).status_code == 200


@pytest.mark.django_db
def test_the_inspector_offers_to_compare(conversation, alice, client_for):
    trace = build(conversation, alice, calculator_run(["6*7"]))
    body = client_for(alice).get(reverse("trace_detail", args=[trace.uuid])).content.decode()
    assert f'action="{reverse("trace_compare")}"' in body and f'value="{trace.uuid}"' in body


@pytest.mark.django_db
def test_long_equal_runs_fold_and_unfold_on_demand(conversation, alice, client_for, django_assert_max_num_queries):
    expressions = [f"{k}+1" for k in range(150)]
    steps_b = calculator_run(expressions)
    steps_b[201] = ("tool", "calculator", {"expression": "100+1"}, "999")
    a = build(conversation, alice, calculator_run(expressions))
    b = build(conversation, alice, steps_b)
    client = client_for(alice)
    with django_assert_max_num_queries(20):
        body = client.get(compare_url(a, b)).content.decode()
    assert "Step 202: tool call calculator — results differ: '101' vs '999'" in html.unescape(body)
    assert "198 steps (1–198) equal — show" in body
    assert 'id="pair-202"' in body and 'id="pair-150"' not in body
    rows = client.get(compare_url(a, b, rows="1-198", d="202"), HTTP_HX_REQUEST="true").content.decode()
    assert rows.count('class="same"') == 198 and "<html" not in rows


# -- the alignment itself ---------------------------------------------------------------------------
def facts(*names: str) -> list[StepFacts]:
    return [StepFacts(seq=k, kind="llm_request" if n == "llm" else "tool_call", name="" if n == "llm" else n,
                      head="" if n == "llm" else "{}") for k, n in enumerate(names, start=1)]


def test_alignment_matches_the_same_calls_around_an_insertion():
    a = facts("llm", "calculator", "llm", "search", "llm")
    b = facts("llm", "calculator", "llm", "current_time", "llm", "search", "llm")
    pairs, by_position = compare.align(a, b)
    assert [(p.a.seq if p.a else None, p.b.seq if p.b else None) for p in pairs] == [
        (1, 1), (2, 2), (3, 3), (None, 4), (None, 5), (4, 6), (5, 7)]
    assert not by_position


def test_ten_thousand_steps_align_around_their_one_difference():
    # (how fast: ``bench.compare``)
    a = facts(*(["llm", "calculator"] * 5_000))
    b = facts(*(["llm", "calculator"] * 3_500 + ["llm", "search"] + ["llm", "calculator"] * 1_499))
    pairs, by_position = compare.align(a, b)
    assert not by_position
    assert len(pairs) == 10_000 and isinstance(pairs[7001], Pair)
    assert pairs[7001].a.name == "calculator" and pairs[7001].b.name == "search"


# -- the API ----------------------------------------------------------------------------------------
@pytest.mark.django_db
def test_the_api_gives_the_same_facts(conversation, alice, team_a, charlie, team_b):
    steps_b = calculator_run(["2+2", "6*7"])
    steps_b[3] = ("tool", "calculator", {"expression": "6*8"}, "48")
    a = build(conversation, alice, calculator_run(["2+2", "6*7"]), answer="42")
    b = build(conversation, alice, steps_b, answer="48")
    response = key_client(alice, team_a, ["traces:read"]).get("/api/v1/traces/compare", {"a": a.uuid, "b": b.uuid})
    assert response.status_code == 200, response.content
    data = response.json()
    assert data["a"]["id"] == str(a.uuid) and data["b"]["id"] == str(b.uuid)
    assert data["first_divergence"]["summary"] == (
        "Step 4: tool call calculator — arguments differ: expression '6*7' vs '6*8'")
    assert data["first_divergence"]["a_seq"] == 4
    assert data["steps"][:4] == [{"position": k, "a": k, "b": k, "state": "same"} for k in range(1, 4)] + [
        {"position": 4, "a": 4, "b": 4, "state": "differs"}]
    totals = {row["key"]: row for row in data["totals"]}
    assert totals["iterations"]["a"] == 3 and totals["cost_usd"]["a"] == "0.01"
    assert data["tools"] == [{"name": "calculator", "a": 2, "b": 2}]
    assert data["answers"]["same"] is False
    assert data["answers"]["diff"] == [{"op": "delete", "text": "42"}, {"op": "insert", "text": "48"}]

    assert key_client(alice, team_a, ["chat"]).get("/api/v1/traces/compare", {"a": a.uuid, "b": b.uuid}).status_code == 403
    assert key_client(charlie, team_b, ["traces:read"]).get(
        "/api/v1/traces/compare", {"a": a.uuid, "b": b.uuid}).status_code == 404
