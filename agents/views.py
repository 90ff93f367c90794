from __future__ import annotations

from django.contrib import messages as flash
from django.core.exceptions import PermissionDenied, ValidationError
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from agentsite.access import get_for_team_or_404, team_required
from agentsite.models import Membership

from . import selectors, services
from .models import Agent, Conversation

Role = Membership.Role
CONVERSATION_PARTS = {"messages"}


@team_required()
@require_GET
def chat(request: HttpRequest) -> HttpResponse:
    context = {
        "conversations": selectors.conversation_list(team=request.team, user=request.user),
        "agents": selectors.agent_choices(team=request.team),
    }
    return render(request, "chat/chat.html", context)


@team_required(Role.MEMBER, action="start conversations")
@require_POST
def conversation_new(request: HttpRequest) -> HttpResponse:
    agent = get_for_team_or_404(Agent, request.team, uuid=request.POST.get("agent", ""))
    conversation = services.conversation_create(team=request.team, agent=agent, user=request.user)
    return redirect("conversation", conversation_uuid=conversation.uuid)


def _conversation(request: HttpRequest, conversation_uuid) -> Conversation:
    return get_for_team_or_404(Conversation.objects.select_related("agent", "created_by"), request.team, uuid=conversation_uuid)


@team_required()
@require_GET
def conversation(request: HttpRequest, conversation_uuid) -> HttpResponse:
    convo = _conversation(request, conversation_uuid)
    context = {
        "conversation": convo,
        "messages": selectors.conversation_messages(convo),
        "active_trace": selectors.conversation_active_trace(convo),
        "can_chat": request.membership.can_chat,
    }
    part = request.GET.get("part")
    template = "chat/conversation.html"
    if request.htmx and part in CONVERSATION_PARTS:
        template += "#" + part
    return render(request, template, context)


@team_required(Role.MEMBER, action="chat")
@require_http_methods(["POST"])
def message_send(request: HttpRequest, conversation_uuid) -> HttpResponse:
    convo = _conversation(request, conversation_uuid)
    text = request.POST.get("text", "")
    try:
        trace = services.turn_start(conversation=convo, user=request.user, text=text)
    except ValidationError as exc:
        message = " ".join(exc.messages)
        if request.htmx:
            response = render(request, "chat/conversation.html#composer-error", {"error": message}, status=422)
            response["HX-Retarget"] = "#composer-error"
            response["HX-Reswap"] = "outerHTML"
            return response
        flash.error(request, message)
        return redirect("conversation", conversation_uuid=convo.uuid)
    except PermissionDenied:
        raise
    if request.htmx:
        context = {"message": trace.user_message, "trace": trace, "conversation": convo}
        return render(request, "chat/conversation.html#sent", context)
    return redirect("conversation", conversation_uuid=convo.uuid)
