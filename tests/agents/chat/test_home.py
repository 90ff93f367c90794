"""The home page starts work: the team's agents with their descriptions and starters, a box that
opens a conversation with its first message, recent conversations and turns the person may see,
the week's spend against the budgets, and how to connect a real model while only the demo
exists."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

from django.urls import reverse
from django.utils import timezone

from agents.chat.services import conversation_create, conversation_share
from agents.models import Agent, Conversation, Provider
from tests.members import member_of
from traces.models import Budget, CostRollup, Trace


def home(client):
    response = client.get(reverse("home"))
    assert response.status_code == 200
    return response.content.decode()


def test_the_agents_show_with_their_description_and_starters(client_for, alice, make_agent):
    make_agent(name="Researcher", description="Finds & cites <sources>.",
               suggested_prompts=["What changed in Django 5.2?", "Summarise <this>"])
    html = home(client_for(alice))
    assert "Researcher" in html
    assert "Finds &amp; cites &lt;sources&gt;." in html  # escaped, never raw
    assert 'value="What changed in Django 5.2?"' in html and "Summarise &lt;this&gt;" in html
    assert 'id="home-text"' in html  # the box that starts a conversation


def test_a_starter_opens_a_conversation_and_sends_it(client_for, alice, make_agent, sent_turns,
                                                      django_capture_on_commit_callbacks):
    agent = make_agent(name="Researcher", suggested_prompts=["What is 6 * 7?"])
    with django_capture_on_commit_callbacks(execute=True):
        response = client_for(alice).post(reverse("conversation_new"),
                                          {"agent": str(agent.uuid), "text": "What is 6 * 7?"})
    conversation = Conversation.objects.get(agent=agent)
    assert response.status_code == 302 and response.url == reverse("conversation", args=[conversation.uuid])
    trace = Trace.objects.get(conversation=conversation)
    assert trace.user_message.text == "What is 6 * 7?" and sent_turns == [trace.pk]
    assert conversation.created_by == alice


def test_a_message_too_long_keeps_the_conversation_and_says_why(client_for, alice, agent, sent_turns):
    response = client_for(alice).post(reverse("conversation_new"),
                                      {"agent": str(agent.uuid), "text": "x" * 200_000}, follow=True)
    assert Conversation.objects.filter(agent=agent).count() == 1 and sent_turns == []
    assert "characters" in response.content.decode()


def test_viewers_get_no_box_and_cannot_start(client_for, vera, agent):
    html = home(client_for(vera))
    assert 'id="home-text"' not in html and "Helper" in html
    response = client_for(vera).post(reverse("conversation_new"), {"agent": str(agent.uuid), "text": "hi"})
    assert response.status_code == 403 and not Conversation.objects.exists()


def test_the_connect_card_shows_only_while_the_team_has_just_the_demo(client_for, alice, bob, agent, team_a):
    assert "Connect a real model" in home(client_for(alice))
    assert reverse("admin:agents_provider_add") in home(client_for(alice))
    member = home(client_for(bob))
    assert "Connect a real model" in member and reverse("admin:agents_provider_add") not in member
    Provider.objects.create(team=team_a, name="OpenAI", kind="openai")
    assert "Connect a real model" not in home(client_for(alice))


def test_recent_work_lists_only_what_the_person_may_see(client_for, alice, bob, vera, agent, charlie):
    mine = conversation_create(agent=agent, membership=member_of(bob, agent.team))
    mine.title = "Bob's private plan"
    mine.save()
    Trace.objects.create(team=agent.team, conversation=mine, agent=agent, user=bob, status="running")
    assert "Bob&#x27;s private plan" in home(client_for(bob))
    assert "Running now" in home(client_for(bob))
    for other in (vera,):
        html = home(client_for(other))
        assert "Bob&#x27;s private plan" not in html and "Running now" not in html
    conversation_share(conversation=mine, membership=member_of(bob, mine), shared=True)
    assert "Running now" in home(client_for(vera))  # a shared conversation's turns are the team's
    assert "Bob&#x27;s private plan" not in home(client_for(charlie))


def test_the_weeks_spend_shows_against_the_budgets(client_for, alice, bob, charlie, agent, team_a):
    today = timezone.localdate()
    common = {"team": team_a, "day": today, "provider": "p", "model": "m", "agent_id": agent.pk}
    CostRollup.objects.create(user_id=alice.pk, cost_units=12_500_000_000, calls=1, **common)
    CostRollup.objects.create(user_id=bob.pk, cost_units=5_000_000_000, calls=1, **common)
    Budget.objects.create(team=team_a, period="day", limit_usd=Decimal("2"), mode="block")
    theirs = home(client_for(charlie))  # another team's spend is not theirs
    assert theirs.count('<span class="stat-value">$0</span>') == 2
    # A week ago is not in the last 7 days.
    CostRollup.objects.create(user_id=alice.pk, cost_units=90_000_000_000, calls=1,
                              **{**common, "day": today - timedelta(days=7)})
    html = home(client_for(alice))
    assert "Spend, last 7 days" in html
    assert "$1.75" in html and "$1.25" in html  # the team's, then alice's own
    assert "$1.75 of $2.00" in html


def test_charlie_sees_only_team_b(client_for, charlie, agent):
    html = home(client_for(charlie))
    assert "Helper" not in html and "Team B" in html
    assert Agent.objects.filter(team=agent.team).exists()


def test_the_page_reads_each_kind_of_row_once_however_many_there_are(
        client_for, alice, bob, team_a, make_agent, django_assert_max_num_queries):
    """Who is asking (the session; the person with their teams: 2), the agents, the recent
    conversations, the running and finished turns, the week's spend, the budgets with their
    spend, and whether a real model is connected with how many members there are (one): 8, for
    4 agents, 9 conversations and 12 turns, so a read per row would show."""
    agents = [make_agent(name=f"Agent {n}", suggested_prompts=["What is 6 * 7?"]) for n in range(4)]
    today = timezone.localdate()
    for n in range(9):
        chat = conversation_create(agent=agents[n % 4], membership=member_of(alice, team_a))
        Conversation.objects.filter(pk=chat.pk).update(title=f"Plan {n}")
        for status in ("completed", "failed", "running" if n < 3 else "completed"):
            question = chat.messages.create(role="user", text=f"Question {n}", author=alice)
            Trace.objects.create(team=team_a, conversation=chat, agent=agents[n % 4], user=alice,
                                 user_message=question, status=status, cost_usd=Decimal("0.25"))
    CostRollup.objects.create(team=team_a, day=today, provider="p", model="m", agent_id=agents[0].pk,
                              user_id=alice.pk, cost_units=12_500_000_000, calls=3)
    Budget.objects.create(team=team_a, period="month", limit_usd=Decimal("2"), mode="warn")
    Budget.objects.create(team=team_a, user=alice, period="day", limit_usd=Decimal("1"), mode="warn")
    c = client_for(alice)
    home(c)  # the first page after signing in keeps the active team in the session
    with django_assert_max_num_queries(8):
        html = home(c)
    assert html.count('class="agent-row"') == 4 and html.count("Plan ") == 6
    assert html.count('class="row trace-row"') == 9  # the 3 running, the newest 6 finished
    assert html.count('class="budget-line') == 2 and "budget is used up ($1.25 of $1.00)" in html
