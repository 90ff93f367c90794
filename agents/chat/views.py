from __future__ import annotations

import uuid as uuid_lib
from typing import Any

from django.contrib import messages as flash
from django.core.exceptions import ValidationError
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.template.loader import render_to_string
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST

from agents.access import Acting, can_act_in, conversation_act_check
from agents.chat import selectors, services
from agents.chat.markdown import streaming_policy
from agents.models import Agent, Attachment, Conversation, Message
from agents.runtime.commands import command_list
from agents.team_config import kept, team_config_read
from agents.tools.mcp.credentials import personal_servers, sign_ins_missing
from agents.tools.mcp.prompts import PROMPT_META, agent_prompts
from agents.tools.mcp.resources import RESOURCES_META, agent_resources, resource_refs
from agents.turns import services as turns
from agents.turns.attachments import MAX_IMAGE_BYTES, MAX_IMAGES_PER_MESSAGE, attachment_create
from agentsite.access import get_for_team_or_404, team_required
from agentsite.live import list_version
from agentsite.models import Membership
from agentsite.redirects import redirect_back
from traces.models import Trace

Role = Membership.Role
CONVERSATION_PARTS = {"messages": "messages-swap"}
SIDEBAR_SIZE = 60


@team_required()
@require_GET
def chat(request: HttpRequest) -> HttpResponse:
    query = request.GET.get("q", "")
    scope = "team" if request.GET.get("scope") == "team" else "mine"
    archived = request.GET.get("archived") == "1"
    context = {
        "conversations": selectors.conversation_list(membership=request.membership, query=query,
                                                     scope=scope, archived=archived),
        "agents": selectors.agent_choices(team=request.team),
        "query": query,
        "scope": scope,
        "archived": archived,
        "can_manage_all": request.membership.has_role(Role.ADMIN),
    }
    template = "chat/chat.html"
    if request.htmx and request.htmx.target == "conversation-list":
        template += "#results"
    elif request.htmx and request.htmx.target == "sidebar-list":
        return _sidebar_list(request, query)
    return render(request, template, context)


def _sidebar_list(request: HttpRequest, query: str) -> HttpResponse:
    """The conversation page's sidebar list, searched (``q``) or read again because the
    person's lists changed: 204 when it shows what the page has (``since``, its version);
    ``current``: the conversation the page shows, marked in the list."""
    conversations = selectors.conversation_list(membership=request.membership, query=query,
                                                limit=SIDEBAR_SIZE)
    version = list_version(conversations)
    if request.GET.get("since") == version:
        return HttpResponse(status=204)
    current = request.GET.get("current", "")
    shown = next((c for c in conversations if c.uuid.hex == current), None)
    groups = selectors.conversation_groups(conversations)
    return render(request, "chat/_sidebar.html#sidebar-list", {
        "sidebar": groups, "sidebar_version": version, "sidebar_key": selectors.sidebar_key(groups, shown),
        "query": query, "membership": request.membership, "conversation": shown})


@team_required(Role.MEMBER, action="start conversations")
@require_POST
def conversation_new(request: HttpRequest) -> HttpResponse:
    """Start a conversation with an agent; with ``text`` (the home page's box, a starter), its
    first message goes at once."""
    agent = get_for_team_or_404(Agent, request.team, uuid=request.POST.get("agent", ""))
    text = request.POST.get("text", "").strip()
    conversation = services.conversation_create(membership=request.membership, agent=agent)
    if text:
        try:
            acting = conversation_act_check(request.membership, conversation, "send messages in it")
            reply = services.chat_command(acting=acting, text=text)
            if reply is not None and reply.prompt is None:
                return _command_response(request, conversation, reply, text)
            turns.turn_send(acting=acting, text=text, parent=turns.LATEST,
                            client_id=request.POST.get("client_id", ""), meta=_message_meta(reply, []))
        except ValidationError as exc:
            flash.error(request, " ".join(exc.messages))
    return redirect("conversation", conversation_uuid=conversation.uuid)


def _conversation(request: HttpRequest, conversation_uuid: Any) -> Conversation:
    """A conversation the person may see (their own, a shared one, or any as an admin); 404
    otherwise, whether it is another team's or a teammate's private one."""
    return selectors.conversation_for_page(request.membership, conversation_uuid)


def _acting(request: HttpRequest, conversation_uuid: Any, action: str) -> Acting:
    """A conversation the person may see, as ``_conversation``, and act in (PermissionDenied
    naming ``action`` otherwise), in one look at the access rules."""
    return conversation_act_check(request.membership, _conversation(request, conversation_uuid), action)


def _parent(convo: Conversation, value: str) -> Trace | Any:
    """The turn a message continues (``parent``): one of this conversation's, already found
    visible with it (any other id is a 404); without one, the newest."""
    if not value:
        return turns.LATEST
    parent_uuid = _uuid_or_none(value)
    parent = Trace.objects.filter(conversation=convo, uuid=parent_uuid).first() if parent_uuid else None
    if parent is None:
        raise Http404("No such turn in this conversation.")
    return parent


def _uuid_or_none(value: str) -> uuid_lib.UUID | None:
    try:
        return uuid_lib.UUID(value) if value else None
    except ValueError:
        return None


def _version(conversation: Conversation) -> str:
    return str(conversation.updated_at.timestamp())


def _sidebar(request: HttpRequest, current: Conversation) -> dict[str, Any]:
    conversations = selectors.conversation_list(membership=request.membership, limit=SIDEBAR_SIZE)
    groups = selectors.conversation_groups(conversations)
    return {"sidebar": groups, "sidebar_version": list_version(conversations),
            "sidebar_key": selectors.sidebar_key(groups, current)}


@team_required()
@require_GET
def conversation(request: HttpRequest, conversation_uuid: Any) -> HttpResponse:
    """The page; with ``part=messages``, the branch on screen (a page's re-read), answered 204
    when ``since`` is the conversation's version (its ``updated_at``, moved when a turn starts
    or ends) and so nothing happened since the page was rendered."""
    convo = _conversation(request, conversation_uuid)
    if request.GET.get("part") == "messages" and request.GET.get("since") == _version(convo):
        return HttpResponse(status=204)
    # The owner and the team's admins send, edit, stop, approve and manage; others read.
    can_act = can_act_in(request.membership, convo)
    # What the branch's HTML shows of its reader, besides their ratings: the forms' CSRF token
    # (kept for the session's) and what they may do. No token yet: nothing kept.
    session = request.META.get("CSRF_COOKIE")
    with team_config_read(convo.team_id):  # one stamp for the meter's window and the prompts
        view = selectors.chat_view(convo, at=_uuid_or_none(request.GET.get("at", "")), reader=request.user,
                                   shown_with=(session, can_act) if session else ())
        prompts = kept(convo.team_id, ("prompts", convo.agent_id), lambda: agent_prompts(convo.agent))
        resources = kept(convo.team_id, ("resources", convo.agent_id), lambda: agent_resources(convo.agent))
        personal = kept(convo.team_id, ("personal servers", convo.agent_id), lambda: personal_servers(convo.agent))
    context = {
        "conversation": convo,
        "version": _version(convo),
        "view": view,
        "can_chat": request.membership.can_chat,
        "can_act": can_act,
        "max_chars": turns.MAX_MESSAGE_CHARS,
        **_sidebar(request, convo),
        "commands": [*command_list(), *((p.usage, p.what) for p in prompts)],
        "prompt_starters": prompts,
        "attachable_resources": resources,
        "sign_ins_missing": sign_ins_missing(personal, request.user) if can_act else [],
        "md_policy": streaming_policy(),
        "max_image_mb": MAX_IMAGE_BYTES // 1024 // 1024,
        "max_images": MAX_IMAGES_PER_MESSAGE,
        "model_choices": services.allowed_models(convo.agent),
    }
    if view.keep_as is not None:  # rendered once here, kept for the next pages (kept_branch)
        view.html = render_to_string("chat/conversation.html#branch", context, request)
        view.keep(view.html)
    template = "chat/conversation.html"
    part = CONVERSATION_PARTS.get(request.GET.get("part", ""))
    if request.htmx and part:
        template += "#" + part
    return render(request, template, context)


def _error(request: HttpRequest, convo: Conversation, exc: ValidationError) -> HttpResponse:
    message = " ".join(exc.messages)
    if request.htmx:
        response = render(request, "chat/conversation.html#composer-error", {"error": message}, status=422)
        response["HX-Retarget"] = "#composer-error"
        response["HX-Reswap"] = "outerHTML"
        return response
    flash.error(request, message)
    return redirect("conversation", conversation_uuid=convo.uuid)


def _branch_response(request: HttpRequest, convo: Conversation, trace: Trace) -> HttpResponse:
    """After an edit or a regeneration: the branch that now ends in ``trace``."""
    if not request.htmx:
        return redirect(reverse("conversation", args=[convo.uuid]) + f"?at={trace.uuid.hex}")
    context = {"conversation": convo, "view": selectors.chat_view(convo, at=trace.uuid)}
    response = render(request, "chat/conversation.html#messages-swap", context)
    response["HX-Push-Url"] = reverse("conversation", args=[convo.uuid]) + f"?at={trace.uuid.hex}"
    return response


@team_required(Role.MEMBER, action="chat")
@require_POST
def message_send(request: HttpRequest, conversation_uuid: Any) -> HttpResponse:
    """Send a message, or run a chat command (``/help`` ...), which never reaches the model.
    ``parent``: the turn the message continues (the branch on screen); ``client_id``: the
    browser's id for it, so a resend never starts a second turn."""
    acting = _acting(request, conversation_uuid, "send messages in it")
    convo = acting.conversation
    untitled = not convo.title
    text = request.POST.get("text", "")
    try:
        reply = services.chat_command(acting=acting, text=text)
        if reply is not None and reply.prompt is None:
            return _command_response(request, convo, reply, text)
        parent = _parent(convo, request.POST.get("parent", ""))
        typed = zip(request.POST.getlist("template_server"), request.POST.getlist("template_uri"), strict=False)
        sent = turns.turn_send(acting=acting, text=text, parent=parent,
                               client_id=request.POST.get("client_id", ""),
                               attachments=request.POST.getlist("attachments"), agent=convo.agent,
                               meta=_message_meta(reply, resource_refs(convo.agent, request.POST.getlist("resources"), typed)))
    except ValidationError as exc:
        return _error(request, convo, exc)
    if not request.htmx:
        return redirect(reverse("conversation", args=[convo.uuid]) + f"?at={sent.trace.uuid.hex}")
    trace = sent.trace
    if sent.resent:
        trace.conversation = convo
        turn, _ = selectors.turn_view(trace)
    else:
        turn = selectors.TurnView(trace, trace.user_message)
    # The first message names the conversation: the page's heading follows.
    return render(request, "chat/conversation.html#sent",
                  {"turn": turn, "conversation": convo, "titled": untitled and bool(convo.title)})


def _message_meta(reply: services.CommandReply | None, resources: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The turn's meta for an MCP prompt's command and the MCP resources attached
    (``agents.tools.mcp.prompts``, ``agents.tools.mcp.resources``)."""
    meta = {PROMPT_META: reply.prompt} if reply is not None and reply.prompt is not None else {}
    if resources:
        meta[RESOURCES_META] = resources
    return meta or None


def _command_response(request: HttpRequest, convo: Conversation, reply: services.CommandReply,
                      text: str) -> HttpResponse:
    if reply.redirect_to is not None:
        url = reverse("conversation", args=[reply.redirect_to.uuid])
        if request.htmx:
            response = HttpResponse(status=204)
            response["HX-Redirect"] = url
            return response
        return redirect(url)
    if not request.htmx:
        flash.info(request, reply.text)
        return redirect("conversation", conversation_uuid=convo.uuid)
    context: dict[str, Any] = {"conversation": convo, "reply": reply, "command_text": text.strip()[:200],
                               "notice_id": uuid_lib.uuid4().hex}
    if reply.changed_model:
        context["meter"] = selectors.chat_view(convo).meter
    return render(request, "chat/conversation.html#notice", context)


@team_required(Role.MEMBER, action="chat")
@require_POST
def turn_regenerate(request: HttpRequest, conversation_uuid: Any, trace_uuid: Any) -> HttpResponse:
    convo = _conversation(request, conversation_uuid)
    trace = get_for_team_or_404(Trace, request.team, uuid=trace_uuid, conversation=convo)
    try:
        new = turns.turn_regenerate(conversation=convo, trace=trace, membership=request.membership)
    except ValidationError as exc:
        return _error(request, convo, exc)
    return _branch_response(request, convo, new)


@team_required(Role.MEMBER, action="chat")
@require_POST
def message_edit(request: HttpRequest, conversation_uuid: Any, message_uuid: Any) -> HttpResponse:
    convo = _conversation(request, conversation_uuid)
    message = get_for_team_or_404(Message, request.team, field="conversation__team", uuid=message_uuid,
                                  conversation=convo)
    try:
        trace = turns.turn_edit(conversation=convo, message=message, membership=request.membership,
                                   text=request.POST.get("text", ""))
    except ValidationError as exc:
        return _error(request, convo, exc)
    return _branch_response(request, convo, trace)


@team_required(Role.MEMBER, action="rename conversations")
@require_POST
def conversation_rename(request: HttpRequest, conversation_uuid: Any) -> HttpResponse:
    convo = _conversation(request, conversation_uuid)
    try:
        services.conversation_rename(conversation=convo, membership=request.membership,
                                     title=request.POST.get("title", ""))
    except ValidationError as exc:
        flash.error(request, " ".join(exc.messages))
    return redirect_back(request, reverse("conversation", args=[convo.uuid]))


@team_required(Role.MEMBER, action="archive conversations")
@require_POST
def conversation_archive(request: HttpRequest, conversation_uuid: Any) -> HttpResponse:
    convo = _conversation(request, conversation_uuid)
    archived = request.POST.get("archived", "1") != "0"
    services.conversation_archive(conversation=convo, membership=request.membership,
                                  archived=archived)
    flash.success(request, f"“{convo}” is {'archived' if archived else 'back in your list'}.")
    return redirect_back(request, reverse("conversation", args=[convo.uuid]))


@team_required(Role.MEMBER, action="attach images")
@require_POST
def attachment_upload(request: HttpRequest, conversation_uuid: Any) -> JsonResponse:
    """An image for the next message: stored with the team, answered with its id and URL."""
    convo = _conversation(request, conversation_uuid)
    upload = request.FILES.get("file")
    if upload is None:
        return JsonResponse({"error": "Choose an image to attach."}, status=400)
    try:
        attachment = attachment_create(conversation=convo, membership=request.membership,
                                       upload=upload)
    except ValidationError as exc:
        return JsonResponse({"error": " ".join(exc.messages)}, status=400)
    return JsonResponse({"id": str(attachment.uuid), "name": attachment.name, "size": attachment.size,
                         "url": reverse("attachment", args=[convo.uuid, attachment.uuid])}, status=201)


@team_required()
@require_GET
def attachment(request: HttpRequest, conversation_uuid: Any, attachment_uuid: Any) -> HttpResponse:
    """An attached image, to who may read its conversation: never another team's (404)."""
    convo = _conversation(request, conversation_uuid)
    row = get_for_team_or_404(Attachment, request.team, uuid=attachment_uuid, conversation=convo)
    response = HttpResponse(bytes(row.data), content_type=row.media_type)
    response["Content-Disposition"] = "inline"
    response["Cache-Control"] = "private, max-age=86400"
    # an image only: nothing in it may run, even opened on its own
    response["Content-Security-Policy"] = "default-src 'none'; img-src 'self'; sandbox"
    response["X-Content-Type-Options"] = "nosniff"
    return response


@team_required(Role.MEMBER, action="pin conversations")
@require_POST
def conversation_pin(request: HttpRequest, conversation_uuid: Any) -> HttpResponse:
    convo = _conversation(request, conversation_uuid)
    services.conversation_pin(conversation=convo, membership=request.membership,
                              pinned=request.POST.get("pinned", "1") != "0")
    return redirect_back(request, reverse("conversation", args=[convo.uuid]))


@team_required(Role.MEMBER, action="chat")
@require_POST
def conversation_model(request: HttpRequest, conversation_uuid: Any) -> HttpResponse:
    """The model picker: what ``/model <name>`` does, as a control."""
    acting = _acting(request, conversation_uuid, "send messages in it")
    convo = acting.conversation
    model = " ".join(request.POST.get("model", "").split())[:200]
    text = f"/model {model}"
    try:
        reply = services.chat_command(acting=acting, text=text)
    except ValidationError as exc:
        return _error(request, convo, exc)
    return _command_response(request, convo, reply, text)


@team_required(Role.MEMBER, action="share conversations")
@require_POST
def conversation_share(request: HttpRequest, conversation_uuid: Any) -> HttpResponse:
    """Share with the team (``shared=1``) or make private again (``shared=0``)."""
    convo = _conversation(request, conversation_uuid)
    shared = request.POST.get("shared", "1") != "0"
    services.conversation_share(conversation=convo, membership=request.membership, shared=shared)
    if request.htmx:
        return render(request, "chat/conversation.html#share", {"conversation": convo, "can_act": True})
    if shared:
        flash.success(request, f"“{convo}” is shared: everyone in the team can read it and its "
                               "traces; only its owner and the team's admins act in it.")
    else:
        flash.success(request, f"“{convo}” is private again: only its owner and the team's admins "
                               "see it.")
    return redirect_back(request, reverse("conversation", args=[convo.uuid]))


@team_required(Role.MEMBER, action="delete conversations")
@require_POST
def conversation_delete(request: HttpRequest, conversation_uuid: Any) -> HttpResponse:
    convo = _conversation(request, conversation_uuid)
    services.conversation_delete(conversation=convo, membership=request.membership)
    flash.success(request, f"Deleted “{convo}”.")
    return redirect("chat")
