"""Fork and replay: start a new run from any step of a stored turn.

``fork_start`` copies what the turn had up to the chosen step and queues a new trace that
continues from there like any turn (a worker, steps, costs, budgets, rate limits), with the
stored turn's tool results replayed instead of run again (``agents.runtime.replay``): on the
same or another model or provider, at the same or another agent version, optionally with an
edited system prompt or message.

Where the fork lives: a conversation of its own, ``ephemeral`` (kept for its trace, left out of
the chat's lists), owned by the person who forked and shared as the original is. It starts with
a copy of the messages the original turn had before it (its branch), then the turn's message
(or the edited one), so the original conversation is never touched and the fork runs at once,
even while the original conversation has a turn in flight.

The fork point (``agents.turns.replay.fork_point``): a model request is sent again (the history
before it is copied); a tool call or an approval is made again from the model answer that asked
for it (that answer and what came before are copied), so the call is replayed from the record.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from django.core.exceptions import ValidationError
from django.db import transaction

from agents.access import conversation_act_check
from agents.models import Agent, AgentVersion, Conversation, Message, Provider
from agents.runtime.history import estimate_tokens
from agents.runtime.messages import Message as RuntimeMessage
from agents.turns.lifecycle import trace_enqueue
from agents.turns.quotas import turn_admit
from agents.turns.replay import FORK_META, fork_point
from agents.turns.selectors import conversation_history_rows
from agents.turns.services import message_text_clean
from agentsite.models import Membership
from traces.models import Step, Trace

MAX_SYSTEM_PROMPT_CHARS = 100_000


@dataclass(frozen=True)
class ForkChoices:
    """What a fork form offers for a trace: the agent's models, the team's providers, the
    agent's versions (newest first)."""

    models: list[str]
    providers: list[str]
    versions: list[int]
    agent_provider: str


def fork_choices(*, trace: Trace) -> ForkChoices:
    agent = _agent_of(trace)
    providers = list(Provider.objects.filter(team_id=trace.team_id).order_by("name")
                     .values_list("name", flat=True))
    versions = list(AgentVersion.objects.filter(agent_id=agent.pk).order_by("-number")
                    .values_list("number", flat=True))
    return ForkChoices(models=agent.model_choices(), providers=providers, versions=versions,
                       agent_provider=agent.provider.name)


def fork_start(*, trace: Trace, seq: int, membership: Membership, provider: str | None = None,
               model: str | None = None, agent_version: int | None = None,
               system_prompt: str | None = None, message: str | None = None,
               allow_new_tool_calls: bool = False) -> Trace:
    """Fork ``trace`` at its step ``seq`` and queue the new run; returns its trace.

    ``provider``: another provider of the team (by name) to send the requests to; ``model``:
    one of the agent's models (``Agent.model_choices``), or any model of another provider;
    ``agent_version``: the agent's configuration as that version recorded it; ``system_prompt``
    and ``message``: edited texts (None: as they were). ``allow_new_tool_calls``: a tool call
    that was not recorded runs for real; otherwise it is refused with a result saying so.

    ``PermissionDenied`` when ``membership`` may not act in the trace's conversation (viewers, other
    members' private conversations); ``ValidationError`` with a sentence for anything else."""
    conversation = Conversation.objects.get(pk=trace.conversation_id)
    conversation_act_check(membership, conversation, "fork its turns")
    if trace.is_active:
        raise ValidationError("This turn is still running. Fork it once it has ended.")
    agent = _agent_of(trace)
    try:
        _, upto_seq = fork_point(trace=trace, seq=seq)
    except Step.DoesNotExist as exc:
        raise ValidationError(f"This trace has no step {seq}.") from exc
    except ValueError as exc:
        raise ValidationError(str(exc)) from exc
    original = trace.user_message
    if original is None:
        raise ValidationError("The message of this turn was deleted, so it cannot be run again.")
    spec: dict[str, Any] = {"upto_seq": upto_seq, "allow_new_tool_calls": bool(allow_new_tool_calls)}
    spec.update(_model_choice(agent, provider=provider, model=model))
    version = _version_choice(agent, agent_version)
    if version is not None:
        spec["agent_version"] = version.number
        spec["tools"] = [str(n) for n in version.snapshot.get("tools") or []]
    if system_prompt is not None:
        system_prompt = system_prompt.replace("\r\n", "\n")
        if len(system_prompt) > MAX_SYSTEM_PROMPT_CHARS:
            raise ValidationError(f"The system prompt is limited to {MAX_SYSTEM_PROMPT_CHARS:,} characters.")
        spec["system_prompt"] = system_prompt
    text, blocks = original.text, original.blocks
    if message is not None and message.strip() != original.text.strip():
        text = message_text_clean(message)
        blocks = RuntimeMessage.user(text).to_dict()["blocks"]
        spec["message"] = text
    trace_uuid = uuid.uuid4()
    quota_keys = turn_admit(membership=membership, api_key=None, request_id=trace_uuid.hex,
                            tokens=estimate_tokens([{"role": "user", "content": text}]))
    history = conversation_history_rows(trace=trace, limit=agent.history_max_messages)
    with transaction.atomic():
        fork_conversation = Conversation.objects.create(
            team_id=trace.team_id, agent=agent, created_by_id=membership.user_id,
            shared=conversation.shared,
            ephemeral=True, title=f"Fork of {conversation}"[:200])
        Message.objects.bulk_create([
            Message(conversation=fork_conversation, role=m.role, blocks=m.blocks, text=m.text,
                    usage=m.usage, outcome=m.outcome, author_id=m.author_id)
            for m in history])
        user_message = Message.objects.create(
            conversation=fork_conversation, role=Message.Role.USER, blocks=blocks, text=text,
            author_id=membership.user_id)
        fork = Trace.objects.create(
            uuid=trace_uuid, team_id=trace.team_id, conversation=fork_conversation, agent=agent,
            agent_version=spec.get("agent_version") or agent.version, user_id=membership.user_id,
            user_message=user_message, status=Trace.Status.QUEUED, quota_keys=quota_keys,
            forked_from=trace, fork_seq=seq, meta={FORK_META: spec})
        Message.objects.filter(pk=user_message.pk).update(trace=fork)
        fork.agent = agent
        trace_enqueue(trace=fork)
    return fork


def _agent_of(trace: Trace) -> Agent:
    agent = (Agent.objects.select_related("provider").filter(pk=trace.agent_id).first()
             if trace.agent_id else None)
    if agent is None:
        raise ValidationError("The agent of this turn no longer exists, so it cannot be run again.")
    return agent


def _model_choice(agent: Agent, *, provider: str | None, model: str | None) -> dict[str, str]:
    provider, model = (provider or "").strip(), (model or "").strip()
    if provider and provider != agent.provider.name:
        if not Provider.objects.filter(team_id=agent.team_id, name=provider).exists():
            raise ValidationError(f"The team has no provider named “{provider}”.")
        return {"provider": provider, "model": model or agent.model}
    if model and model not in agent.model_choices():
        raise ValidationError(f"{agent.name} may use {', '.join(agent.model_choices())}, not "
                              f"“{model}”. Pick one of those, or another provider.")
    return {"model": model} if model else {}


def _version_choice(agent: Agent, number: int | None) -> AgentVersion | None:
    if number is None or number == agent.version:
        return None
    version = AgentVersion.objects.filter(agent_id=agent.pk, number=number).first()
    if version is None:
        raise ValidationError(f"{agent.name} has no version {number}.")
    return version
