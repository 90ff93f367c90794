"""Authentication by team API key, and what a request with one may do.

``KeyAuth`` finds the caller (``agentsite.api_keys.api_key_authenticate``) and sets
``request.user``, ``request.team`` and ``request.membership`` from the key, so the same access
helpers as the pages decide what exists (another team's object is a 404) and what the role
allows (403). ``scope_check`` narrows that to the key's scopes.
"""

from __future__ import annotations

import logging
from typing import Any

from django.http import HttpRequest
from ninja.security import HttpBearer

from agentsite.api_keys import (
    ApiKeyRefused,
    Caller,
    api_key_authenticate,
    bearer_token,
    scope_required,
)
from agentsite.models import ApiKey

logger = logging.getLogger("agentsite.api")
Scope = ApiKey.Scope


class KeyAuth(HttpBearer):
    """``Authorization: Bearer ask_…``; a refused key raises ``ApiKeyRefused`` (the API's
    handler answers 401 with the reason, never a bare "unauthorized")."""

    openapi_description = "A team API key (ask_…), made on the team's API keys page."

    def __call__(self, request: HttpRequest) -> Any:
        header = request.headers.get(self.header, "")
        if not bearer_token(header):
            raise ApiKeyRefused("No API key was sent. Send it as 'Authorization: Bearer <key>'.",
                                code="missing_api_key")
        return super().__call__(request)

    def authenticate(self, request: HttpRequest, token: str) -> Caller:
        caller = api_key_authenticate(token)
        # Every use of a key, in the log (its turns also carry the key on their traces).
        logger.info("API key %s… of team %s used as %s: %s %s", caller.key.prefix, caller.team.pk,
                    caller.user.get_username(), request.method, request.path)
        request.caller = caller
        request.user = caller.user
        request.team = caller.team
        request.membership = caller.membership
        return caller


def caller_of(request: HttpRequest) -> Caller:
    return request.auth  # type: ignore[attr-defined,return-value]


def scope_check(request: HttpRequest, scope: str) -> Caller:
    """The request's caller, if its key carries ``scope`` (else 403)."""
    caller = caller_of(request)
    scope_required(caller, scope)
    return caller
