"""Every error of the API in OpenAI's shape, ``{"error": {"message", "type", "param", "code"}}``,
with the status OpenAI's clients map to their exception classes: 400 (with the field in
``param``), 401, 403, 404, 409, 413 (a body over ``DATA_UPLOAD_MAX_MEMORY_SIZE``), 429 (with
``Retry-After``), 503. A path of the API that does not exist is a 404 in the same shape, and a
method a path does not take a 405 (with ``Allow``): never an HTML page. No view of the API takes
a session or a CSRF token: a key is its only credential."""

from __future__ import annotations

import functools
from collections.abc import Callable
from inspect import iscoroutinefunction
from typing import Any

from django.conf import settings
from django.core.exceptions import PermissionDenied, RequestDataTooBig, ValidationError
from django.db import DatabaseError
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseNotAllowed, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from ninja import NinjaAPI, Schema
from ninja.errors import AuthenticationError, HttpError
from ninja.errors import ValidationError as NinjaValidationError

from agents.turns.quotas import QuotaExceeded
from agentsite.api_keys import ApiKeyRefused
from agentsite.db import DATABASE_LOST_MESSAGE, connection_lost

TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
         404: "not_found_error", 405: "invalid_request_error", 409: "conflict_error",
         413: "invalid_request_error",
         429: "rate_limit_error",
         503: "service_unavailable"}


class ErrorDetail(Schema):
    message: str
    type: str
    param: str | None = None
    code: str | None = None


class ErrorOut(Schema):
    """Every error, in OpenAI's shape."""

    error: ErrorDetail


def errors(*codes: int) -> dict[int, type[ErrorOut]]:
    """The error answers an operation documents: always 401 (no valid key) and 403 (a scope
    the key lacks), and ``codes``."""
    return {code: ErrorOut for code in sorted({401, 403, *codes})}


class ApiError(Exception):
    """An error to answer as is: ``ApiError(400, "…", param="messages")``."""

    def __init__(self, status: int, message: str, *, param: str | None = None, code: str | None = None,
                 headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.param, self.code = status, message, param, code
        self.headers = headers or {}


def error_response(status: int, message: str, *, param: str | None = None, code: str | None = None,
                   headers: dict[str, str] | None = None) -> HttpResponse:
    response = JsonResponse({"error": {"message": message, "type": TYPES.get(status, "api_error"),
                                       "param": param, "code": code}}, status=status)
    for name, value in (headers or {}).items():
        response[name] = value
    return response


def _first_message(exc: ValidationError) -> tuple[str, str | None]:
    if hasattr(exc, "error_dict"):
        field, errors = next(iter(exc.error_dict.items()))
        return " ".join(str(m) for e in errors for m in e.messages), None if field == "__all__" else field
    return " ".join(exc.messages), None


def _schema_problem(exc: NinjaValidationError) -> tuple[str, str | None]:
    errors: list[dict[str, Any]] = list(exc.errors or [])
    if not errors:
        return "The request is not valid.", None
    first = errors[0]
    loc = [str(part) for part in first.get("loc", ()) if part not in ("body", "query", "path", "payload")]
    param = ".".join(loc) or None
    return f"{param + ': ' if param else ''}{first.get('msg', 'is not valid')}.", param


def install_handlers(api: NinjaAPI) -> None:
    """Answer every error of ``api`` in the one shape."""

    @api.exception_handler(ApiError)
    def api_error(request: HttpRequest, exc: ApiError) -> HttpResponse:
        return error_response(exc.status, exc.message, param=exc.param, code=exc.code, headers=exc.headers)

    @api.exception_handler(ApiKeyRefused)
    def refused(request: HttpRequest, exc: ApiKeyRefused) -> HttpResponse:
        return error_response(exc.status, exc.message, code=exc.code)

    @api.exception_handler(AuthenticationError)
    def unauthenticated(request: HttpRequest, exc: AuthenticationError) -> HttpResponse:
        return error_response(401, "No valid API key was sent. Send it as 'Authorization: Bearer <key>'.",
                              code="invalid_api_key")

    @api.exception_handler(QuotaExceeded)
    def over_quota(request: HttpRequest, exc: QuotaExceeded) -> HttpResponse:
        headers = {"Retry-After": str(exc.retry_after_s)} if exc.retry_after_s else {}
        return error_response(429, exc.message, code=exc.code, headers=headers)

    @api.exception_handler(Http404)
    def not_found(request: HttpRequest, exc: Http404) -> HttpResponse:
        return error_response(404, str(exc) or "Not found.", code="not_found")

    @api.exception_handler(PermissionDenied)
    def forbidden(request: HttpRequest, exc: PermissionDenied) -> HttpResponse:
        return error_response(403, str(exc) or "You may not do this.", code="forbidden")

    @api.exception_handler(ValidationError)
    def invalid(request: HttpRequest, exc: ValidationError) -> HttpResponse:
        message, param = _first_message(exc)
        return error_response(400, message, param=param, code="invalid_value")

    @api.exception_handler(NinjaValidationError)
    def schema_invalid(request: HttpRequest, exc: NinjaValidationError) -> HttpResponse:
        message, param = _schema_problem(exc)
        return error_response(400, message, param=param, code="invalid_value")

    @api.exception_handler(RequestDataTooBig)
    def too_big(request: HttpRequest, exc: RequestDataTooBig) -> HttpResponse:
        limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        return error_response(413, f"The request body is larger than the {limit / 1e6:.1f} MB "
                                   "accepted. Send less history.", code="request_too_large")

    @api.exception_handler(DatabaseError)
    def database_error(request: HttpRequest, exc: DatabaseError) -> HttpResponse:
        if not connection_lost(exc):
            raise exc
        # Nothing of the request's transaction was kept: sending it again is safe.
        return error_response(503, DATABASE_LOST_MESSAGE, code="database_unavailable",
                              headers={"Retry-After": "1"})

    @api.exception_handler(HttpError)
    def http_error(request: HttpRequest, exc: HttpError) -> HttpResponse:
        if isinstance(exc.__cause__, ApiError):  # the body parser's own words
            return api_error(request, exc.__cause__)
        return error_response(exc.status_code, str(exc))


@csrf_exempt
def not_found_view(request: HttpRequest, rest: str = "") -> HttpResponse:
    """Any other path under the API's prefixes: a 404 a client can read."""
    return error_response(404, f"There is no API endpoint at {request.path}. The endpoints are "
                               "listed at /api/v1/docs.", code="unknown_endpoint")


def _method_error(request: HttpRequest, response: Any) -> Any:
    if not isinstance(response, HttpResponseNotAllowed):
        return response
    allowed = response["Allow"]
    return error_response(405, f"{request.method} is not allowed on {request.path}; it takes "
                               f"{allowed}.", code="method_not_allowed", headers={"Allow": allowed})


def method_errors_shaped(view: Callable[..., Any]) -> Callable[..., Any]:
    """``view`` (one of django-ninja's, which answers a method its path does not take with a
    plain-text 405) answering that 405 in the API's shape, with its ``Allow`` header."""
    if iscoroutinefunction(view):
        async def shaped_async(request: HttpRequest, *args: Any, **kwargs: Any) -> Any:
            return _method_error(request, await view(request, *args, **kwargs))

        shaped: Callable[..., Any] = shaped_async
    else:
        def shaped_sync(request: HttpRequest, *args: Any, **kwargs: Any) -> Any:
            return _method_error(request, view(request, *args, **kwargs))

        shaped = shaped_sync
    return csrf_exempt(functools.wraps(view)(shaped))
