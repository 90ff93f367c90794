"""The cache explainer: the first region of a request that changed since the one before it
(tool set or order, a system block, an earlier message, the model), what the miss cost, the demo
model's cache reads, the step's "Prompt cache" section and the costs page's figure per agent."""

from __future__ import annotations

import html
import math
from datetime import timedelta
from decimal import Decimal

import pytest
from django.urls import reverse

from agents.models import Conversation
from agents.runtime.messages import Message
from agents.runtime.providers.base import ChatRequest, SystemBlock
from agents.runtime.providers.demo import DemoProvider
from agents.runtime.providers.demo_cache import PROMPT_CACHE
from agents.runtime.tools import ToolSpec
from traces.costs.cache import CACHE_MIN_TOKENS, explain, first_change
from traces.costs.cache_selectors import losses_backfill, step_cache_explanation
from traces.costs.pricing import price_table_for
from traces.costs.repricing import trace_reprice_apply
from traces.costs.rollups import cache_lost_backfill
from traces.models import ConversationCostRollup, CostRollup, ModelPrice, Step

from ..cost_helpers import EARLY, run

LONG_PROMPT = "You are a careful assistant. Answer briefly and check your arithmetic. " * 80


@pytest.fixture(autouse=True)
def _fresh_demo_cache():
    PROMPT_CACHE.clear()
    yield
    PROMPT_CACHE.clear()


def request(*, model: str = "m", tools=("calculator", "current_time"), system=("Be brief.", "## Current Date & Time\n\n2026-01-01"),
            messages=(("user", "hello"),), specs=None) -> dict:
    return {
        "model": model,
        "tools": list(tools),
        "tool_specs": specs if specs is not None else [{"name": t, "description": f"The {t} tool.", "parameters": {}}
                                                        for t in tools],
        "system": [{"text": text, "cacheable": i == 0} for i, text in enumerate(system)],
        "messages": [{"role": role, "blocks": [{"type": "text", "text": text}]} for role, text in messages],
    }


# -- naming the first change ------------------------------------------------------------------------
def test_a_changed_system_prompt_is_named_as_the_agents_system_prompt():
    change, prefix = first_change(request(), request(system=("Be very brief.", "## Current Date & Time\n\n2026-01-01")))

    assert change.region == "system" and change.index == 1
    assert change.label == "the agent's system prompt (system block 1)"
    assert change.before.startswith("Be brief") and change.after.startswith("Be very brief")
    assert prefix > 0  # the tools before it could still be read


def test_the_date_block_is_named_when_only_the_time_changed():
    change, _ = first_change(request(), request(system=("Be brief.", "## Current Date & Time\n\n2026-01-02")))

    assert change.index == 2 and change.label.startswith("the date and time block")


def test_a_reordered_tool_list_is_named_as_the_order_of_the_tools():
    change, prefix = first_change(request(), request(tools=("current_time", "calculator")))

    assert (change.region, change.label) == ("tools", "the order of the tools")
    assert change.detail == "Was calculator, current_time; now current_time, calculator."
    assert prefix == 0


def test_an_added_tool_and_a_changed_definition_are_named():
    added, _ = first_change(request(), request(tools=("calculator", "current_time", "http_fetch")))
    specs = [{"name": "calculator", "description": "Adds up.", "parameters": {}},
             {"name": "current_time", "description": "The current_time tool.", "parameters": {}}]
    edited, _ = first_change(request(), request(specs=specs))

    assert (added.label, added.detail) == ("the tool set", "Added http_fetch.")
    assert edited.label == "the definition of the tool calculator" and edited.index == 1


def test_an_edited_earlier_message_is_named_with_its_role_and_index():
    before = request(messages=(("user", "what is 2+2"), ("assistant", "4"), ("user", "and 3+3?")))
    after = request(messages=(("user", "what is 2+2"), ("assistant", "5"), ("user", "and 3+3?"), ("assistant", "6")))

    change, _ = first_change(before, after)

    assert (change.region, change.index, change.role) == ("messages", 2, "assistant")
    assert change.label == "an earlier message: message 2 (assistant)"
    assert (change.before, change.after) == ("4", "5")


def test_a_stable_prefix_is_a_hit_with_nothing_lost():
    before = request(messages=(("user", "what is 2+2"),))
    after = request(messages=(("user", "what is 2+2"), ("assistant", "4"), ("user", "thanks")))

    cache = explain(before, after, previous_kind="turn", prompt_tokens=3000, previous_tokens=2900,
                    read_tokens=2900, input_per_mtok=Decimal(3), cache_read_per_mtok=Decimal("0.3"))

    assert cache.change is None and cache.verdict == "hit"
    assert cache.lost_tokens == 0 and cache.lost_usd == 0
    assert 0.5 < cache.prefix_share < 1


def test_a_miss_is_priced_at_the_input_rate_less_the_cache_read_rate():
    changed = explain(request(), request(model="other"), previous_kind="turn", prompt_tokens=3000,
                      previous_tokens=2000, read_tokens=0, input_per_mtok=Decimal(3),
                      cache_read_per_mtok=Decimal("0.3"))
    unchanged_but_unread = explain(request(), request(), previous_kind="turn", prompt_tokens=3000,
                                   previous_tokens=3000, read_tokens=1000, input_per_mtok=Decimal(3),
                                   cache_read_per_mtok=None)
    short = explain(request(), request(model="other"), previous_kind="turn", prompt_tokens=900,
                    previous_tokens=800, read_tokens=0, input_per_mtok=Decimal(3),
                    cache_read_per_mtok=Decimal("0.3"))

    assert changed.change.label == "the model" and changed.verdict == "changed"
    assert changed.lost_tokens == 2000 and changed.lost_usd == Decimal("0.0054")
    # without a cache-read price, cached tokens cost the same: nothing is lost
    assert unchanged_but_unread.verdict == "missed" and unchanged_but_unread.lost_usd == 0
    assert short.lost_tokens == 0 and 900 < CACHE_MIN_TOKENS


# -- the demo model's cache reads -------------------------------------------------------------------
TOOLS = [ToolSpec("calculator", "Evaluates arithmetic.", {"type": "object", "properties": {}})]


async def demo_chat(provider, messages, *, system=LONG_PROMPT, model="demo"):
    return await provider.chat(ChatRequest(model=model, messages=messages, system=[SystemBlock(system, True)],
                                           tools=TOOLS))


async def test_the_demo_model_reads_a_repeated_prefix_from_its_cache():
    provider = DemoProvider(name="cache-demo")
    first = [Message.user("hello")]
    second = [*first, Message.assistant("Hello!"), Message.user("thanks")]

    one = await demo_chat(provider, first)
    two = await demo_chat(provider, second)

    assert one.usage.cache_read_tokens == 0
    before = len(LONG_PROMPT) + len("calculator") + len("Evaluates arithmetic.") + len(str(TOOLS[0].parameters)) + len("hello")
    assert two.usage.cache_read_tokens == before // 4 >= CACHE_MIN_TOKENS
    whole = before + len("Hello!") + len("thanks")
    assert two.usage.input_tokens + two.usage.cache_read_tokens == math.ceil(whole / 4)


async def test_the_demo_model_reads_nothing_after_a_change_a_short_prompt_or_with_caching_off():
    provider = DemoProvider(name="cache-demo")
    await demo_chat(provider, [Message.user("hello")])

    changed = await demo_chat(provider, [Message.user("hello")], system="Something else. " + LONG_PROMPT)
    other_model = await demo_chat(provider, [Message.user("hello")], model="demo-2")
    short = DemoProvider(name="short")
    await demo_chat(short, [Message.user("hi")], system="Be brief.")
    short_again = await demo_chat(short, [Message.user("hi")], system="Be brief.")
    off = DemoProvider(name="cache-demo", capabilities={"prompt_caching": False})
    uncached = await demo_chat(off, [Message.user("hello")])

    assert changed.usage.cache_read_tokens == 0 < changed.usage.input_tokens
    assert other_model.usage.cache_read_tokens == 0
    assert short_again.usage.cache_read_tokens == 0
    assert uncached.usage.cache_read_tokens == 0


async def test_a_demo_provider_can_keep_shorter_prompts_as_the_seeded_demo_does():
    """The seeded demo agent's provider keeps prompts from 256 tokens, so its short prompts
    show cache reads offline; the default keeps providers' 1,024."""
    system = "Answer in plain words. " * 60  # about 345 tokens
    default, seeded = DemoProvider(name="default-min"), DemoProvider(name="seeded-min", cache_min_tokens=256)
    for provider in (default, seeded):
        await demo_chat(provider, [Message.user("hello")], system=system)
    again_default = await demo_chat(default, [Message.user("hello")], system=system)
    again_seeded = await demo_chat(seeded, [Message.user("hello")], system=system)
    assert again_default.usage.cache_read_tokens == 0
    assert 256 <= again_seeded.usage.cache_read_tokens < CACHE_MIN_TOKENS


# -- on recorded turns --------------------------------------------------------------------------------
@pytest.fixture
def cached_agent(make_agent, team_a):
    ModelPrice.objects.create(team=team_a, provider_kind="demo", model="demo-cached", input_per_mtok=Decimal(3),
                              output_per_mtok=Decimal(15), cache_read_per_mtok=Decimal("0.3"), effective_from=EARLY)
    agent = make_agent(name="Cached", system_prompt=LONG_PROMPT)
    agent.model = "demo-cached"
    agent.save(update_fields=["model"])
    return agent


def llm_steps(trace) -> list[Step]:
    return list(trace.steps.filter(kind="llm_request").select_related("price", "trace").order_by("seq"))


@pytest.mark.django_db(transaction=True)
def test_a_turn_reads_its_stable_prefix_and_a_changed_system_prompt_is_named(
        cached_agent, alice, charlie, sent_turns, use_redis, client_for):
    chat = Conversation.objects.create(team=cached_agent.team, agent=cached_agent, created_by=alice)
    first = run(chat, alice, "call the current_time tool 2 times")
    steps = llm_steps(first)
    assert len(steps) == 3 and steps[1].cache_read_tokens > 0

    opening = step_cache_explanation(steps[0])
    within = step_cache_explanation(steps[1])
    assert opening.verdict == "first" and opening.lost_usd == 0
    assert within.previous == "turn" and within.verdict == "hit" and within.lost_usd == 0

    cached_agent.system_prompt = "Answer in French. " + LONG_PROMPT
    cached_agent.save(update_fields=["system_prompt"])
    second = run(chat, alice, "what is 2+2")
    after = llm_steps(second)[0]
    cache = step_cache_explanation(after)

    assert cache.previous == "conversation" and cache.verdict == "changed"
    assert cache.change.label == "the agent's system prompt (system block 1)"
    assert after.cache_read_tokens == 0 < cache.lost_tokens
    assert cache.lost_usd == Decimal(cache.lost_tokens) * Decimal("2.7") / 1_000_000

    url = reverse("step_cache", args=[second.uuid, after.seq])
    page = html.unescape(client_for(alice).get(url).content.decode())
    assert "The agent's system prompt (system block 1)" in page
    assert "Answer in French." in page and "Lost to the miss" in page
    assert client_for(charlie).get(url).status_code == 404
    detail = client_for(alice).get(reverse("step_detail", args=[second.uuid, after.seq])).content.decode()
    assert url in detail  # the step's panel loads its "Prompt cache" section

    # The costs page reads what each request's miss cost from the ledger: the explainer's sum.
    costs = client_for(alice).get(reverse("costs"))
    every = [step_cache_explanation(s) for t in (first, second) for s in llm_steps(t)]
    lost = sum((c.lost_usd for c in every), Decimal(0))
    assert costs.context["totals"].cache_lost == lost.quantize(Decimal("1e-10")) > 0
    assert after.meta["cache_lost_tokens"] == cache.lost_tokens
    agent_row = next(g for g in costs.context["tables"]["agent"] if g.key == cached_agent.pk)
    assert agent_row.amounts.cache_lost == costs.context["totals"].cache_lost
    assert agent_row.amounts.cache_read_share > 0
    content = costs.content.decode()
    assert "Lost to cache misses" in content and "Cache hit" in content
    assert client_for(charlie).get(reverse("costs")).context["totals"].cache_lost == 0
    # the per-conversation ledger keeps the same figure
    assert sum(g.amounts.cache_lost for g in costs.context["tables"]["conversation"]) == \
        costs.context["totals"].cache_lost


@pytest.mark.django_db(transaction=True)
def test_losses_stored_before_the_ledger_kept_them_are_backfilled_and_repricing_moves_them(
        cached_agent, alice, sent_turns, use_redis):
    chat = Conversation.objects.create(team=cached_agent.team, agent=cached_agent, created_by=alice)
    run(chat, alice, "hello")
    cached_agent.system_prompt = "Answer in French. " + LONG_PROMPT
    cached_agent.save(update_fields=["system_prompt"])
    second = run(chat, alice, "what is 2+2")
    recorded = {s.pk: dict(s.meta) for s in Step.objects.filter(kind="llm_request")}
    ledgers = (CostRollup, ConversationCostRollup)

    def lost() -> list[int]:
        return [sum(m.objects.values_list("cache_lost_units", flat=True)) for m in ledgers]

    kept = lost()
    assert kept[0] == kept[1] > 0
    # as a site that ran before the ledger kept losses left it: no loss on steps or in roll-ups
    for step in Step.objects.filter(kind="llm_request"):
        step.meta = {k: v for k, v in step.meta.items() if not k.startswith("cache_lost")}
        step.save(update_fields=["meta"])
    for model in ledgers:
        model.objects.update(cache_lost_units=0)
    assert losses_backfill(step_model=Step, price_model=ModelPrice) == 1
    cache_lost_backfill(models=(Step, *ledgers))
    assert lost() == kept
    assert {s.pk: s.meta for s in Step.objects.filter(kind="llm_request")} == recorded
    # a corrected price with a dearer cache read: the same tokens lost cost less
    old = ModelPrice.objects.get(model="demo-cached")
    ModelPrice.objects.create(team=old.team, provider_kind="demo", model="demo-cached", version=2,
                              input_per_mtok=Decimal(3), output_per_mtok=Decimal(16),
                              cache_read_per_mtok=Decimal(2), effective_from=EARLY + timedelta(seconds=1))
    trace_reprice_apply(trace=second, table=price_table_for(old.team_id), actor=alice)
    missed = Step.objects.get(trace=second, kind="llm_request", meta__cache_lost_tokens__gt=0)
    assert missed.meta["cache_lost_units"] == missed.meta["cache_lost_tokens"] * 10_000  # $1 a million
    assert lost() == [missed.meta["cache_lost_units"]] * 2


# -- the provider's minimum and the reusable prefix -----------------------------------------------------
def test_a_read_proves_reuse_the_prefix_is_never_below_it_and_a_short_prompt_can_lose():
    before, now = request(), request(system=("Be very brief.", "## Current Date & Time\n\n2026-01-01"))
    # the tools before the change are a small share of the characters, but the provider read 300
    cache = explain(before, now, previous_kind="turn", prompt_tokens=500, previous_tokens=500, read_tokens=300,
                    input_per_mtok=Decimal(3), cache_read_per_mtok=Decimal("0.3"), min_tokens=256)
    assert cache.prefix_tokens == 300 and cache.prefix_share == 0.6
    assert cache.lost_tokens == 200 and not cache.too_short
    # the same prompts under a minimum of 1,024 lose nothing: nothing that short is cached
    short = explain(before, now, previous_kind="turn", prompt_tokens=500, previous_tokens=500, read_tokens=0,
                    input_per_mtok=Decimal(3), cache_read_per_mtok=Decimal("0.3"))
    assert (short.lost_tokens, short.too_short, short.min_tokens) == (0, True, CACHE_MIN_TOKENS)
    kept = explain(before, now, previous_kind="turn", prompt_tokens=500, previous_tokens=500, read_tokens=0,
                   input_per_mtok=Decimal(3), cache_read_per_mtok=Decimal("0.3"), min_tokens=256)
    assert kept.lost_tokens == 500 and kept.lost_usd == Decimal(500) * Decimal("2.7") / 1_000_000


@pytest.mark.django_db(transaction=True)
def test_the_request_records_its_providers_minimum_and_the_explainer_uses_it(
        make_agent, team_a, alice, sent_turns, use_redis, client_for):
    """The seeded demo's provider caches prompts from 256 tokens: its requests record that, so a
    miss of a ~500-token prompt after a change is priced (not "under 1,024 tokens")."""
    ModelPrice.objects.create(team=team_a, provider_kind="demo", model="demo-short", input_per_mtok=Decimal(3),
                              output_per_mtok=Decimal(15), cache_read_per_mtok=Decimal("0.3"), effective_from=EARLY)
    prompt = "Answer in plain words and check each step. " * 25
    agent = make_agent(name="Short prompts", system_prompt=prompt, provider_options={"cache_min_tokens": 256})
    agent.model = "demo-short"
    agent.save(update_fields=["model"])
    chat = Conversation.objects.create(team=agent.team, agent=agent, created_by=alice)
    first = run(chat, alice, "call the current_time tool 1 times")
    read_step = llm_steps(first)[1]
    assert read_step.meta["cache_min_tokens"] == 256 and read_step.cache_read_tokens > 0
    within = step_cache_explanation(read_step)
    assert within.prefix_tokens >= read_step.cache_read_tokens

    agent.system_prompt = "Be terse. " + prompt
    agent.save(update_fields=["system_prompt"])
    after = llm_steps(run(chat, alice, "what is 2+2"))[0]
    cache = step_cache_explanation(after)
    assert cache.min_tokens == 256 and cache.prompt_tokens < CACHE_MIN_TOKENS
    assert cache.verdict == "changed" and cache.lost_tokens > 0 and cache.lost_usd > 0

    # a provider at the default minimum records it too, and the same miss loses nothing there
    plain = make_agent(name="Default minimum", system_prompt=prompt)
    plain_chat = Conversation.objects.create(team=plain.team, agent=plain, created_by=alice)
    run(plain_chat, alice, "hello")
    plain.system_prompt = "Be terse. " + prompt
    plain.save(update_fields=["system_prompt"])
    plain_after = llm_steps(run(plain_chat, alice, "what is 2+2"))[0]
    assert plain_after.meta["cache_min_tokens"] == CACHE_MIN_TOKENS
    plain_cache = step_cache_explanation(plain_after)
    assert plain_cache.lost_tokens == 0 and plain_cache.too_short
    page = html.unescape(client_for(alice).get(
        reverse("step_cache", args=[plain_after.trace.uuid, plain_after.seq])).content.decode())
    assert f"this provider caches prompts of {CACHE_MIN_TOKENS} tokens or more" in page


def test_reading_all_but_less_than_a_cache_block_is_a_hit_not_a_miss():
    """Providers read their cache in blocks: 702 of 703 tokens read is all it could."""
    cache = explain(request(), request(messages=(("user", "hello"), ("assistant", "hi"))), previous_kind="turn",
                    prompt_tokens=712, previous_tokens=703, read_tokens=702, input_per_mtok=Decimal(3),
                    cache_read_per_mtok=Decimal("0.3"), min_tokens=256)
    assert (cache.verdict, cache.lost_tokens, cache.lost_usd) == ("hit", 0, 0)
    # a block or more short of it is a miss
    assert explain(request(), request(messages=(("user", "hello"), ("assistant", "hi"))), previous_kind="turn",
                   prompt_tokens=712, previous_tokens=703, read_tokens=500, min_tokens=256).lost_tokens == 203
