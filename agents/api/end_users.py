"""End users behind one key: the people of a key's application, named by the caller.

``/v1/chat/completions`` takes OpenAI's ``user``; the REST API's conversation and message
endpoints take the ``X-Agentsite-End-User`` header. Either is an opaque id of the caller's
choosing (trimmed; at most ``END_USER_MAX_CHARS`` characters, else a 400 naming the field). A
key made to require one refuses a call without it (400 ``end_user_required``).

An end user belongs to the key's person: every key of that person names the same end users (a
replaced key keeps its end users' memory), keys of other people never do. A conversation made
for an end user keeps it (``Conversation.end_user``), and its turns recall and store that end
user's memory only. With an end user given, the API shows that end user's conversations and
nothing else: any other conversation is a 404, the person's own ones included. Without one, the
person sees what they always saw, their end users' conversations among them."""

from __future__ import annotations

from django.db.models import QuerySet
from django.http import HttpRequest

from agents.api.errors import ApiError
from agents.models import Conversation
from agents.models.conversations import END_USER_MAX_CHARS
from agentsite.api_keys import Caller

END_USER_HEADER = "X-Agentsite-End-User"


def end_user_clean(value: str | None, *, param: str, caller: Caller | None = None) -> str:
    """The end user as stored: trimmed, "" when none was given; too long is a 400 on ``param``,
    and so is none for a key that requires one (``ApiKey.require_end_user``)."""
    value = (value or "").strip()
    if not value and caller is not None and caller.key.require_end_user:
        raise ApiError(400, f"This key requires the end user each call is for: send {param}.",
                       param=param, code="end_user_required")
    if len(value) > END_USER_MAX_CHARS:
        raise ApiError(400, f"The end user id is {len(value):,} characters long; the limit is "
                            f"{END_USER_MAX_CHARS}. Send a shorter id (a hash of yours, for example).",
                       param=param, code="end_user_too_long")
    return value


def request_end_user(request: HttpRequest, caller: Caller | None = None) -> str:
    """The end user named by the request's ``X-Agentsite-End-User`` header ("" for none;
    required by ``caller``'s key when it says so)."""
    return end_user_clean(request.headers.get(END_USER_HEADER), param=END_USER_HEADER, caller=caller)


def end_user_conversations(queryset: QuerySet[Conversation], caller: Caller,
                           end_user: str) -> QuerySet[Conversation]:
    """``queryset`` limited to ``end_user``'s conversations of the key's person (unchanged when
    no end user is given: the person's own view)."""
    if not end_user:
        return queryset
    return queryset.filter(created_by_id=caller.membership.user_id, end_user=end_user)
