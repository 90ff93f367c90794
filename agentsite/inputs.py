"""Form input that cannot be stored or parsed safely, handled once for every view and admin
page (``SafeInputMiddleware``):

* NUL and the other C0 control characters (except tab, newline and carriage return) are
  stripped from every submitted value: PostgreSQL refuses NUL in text (a 500 before), and the
  others are never meant as text;
* a value that is JSON (starts with ``[`` or ``{``) may nest at most ``MAX_JSON_DEPTH`` levels:
  deeper input would exhaust the parser's recursion (a 500 before) and is answered with a 400
  that says why. Sizes are bounded by Django's ``DATA_UPLOAD_MAX_MEMORY_SIZE``.

The API (``settings.API_PATH_PREFIXES``) takes JSON bodies only and applies the same rules in its
own parser; its bodies are left unread here, for the parser to read.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from django.conf import settings
from django.http import HttpRequest, HttpResponse, HttpResponseBadRequest, QueryDict

MAX_JSON_DEPTH = 64
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f]")
_JSON_TOKENS = re.compile(r'"(?:[^"\\]|\\.)*+"|[\[\]{}]')


def strip_controls(text: str) -> str:
    return _CONTROL.sub("", text)


def json_depth(text: str) -> int:
    """The deepest nesting of ``[``/``{`` in ``text`` outside strings, in one linear pass."""
    depth = deepest = 0
    for token in _JSON_TOKENS.finditer(text):
        char = token.group()
        if char in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif char in "]}":
            depth = max(depth - 1, 0)
    return deepest


def too_deep(text: str, limit: int = MAX_JSON_DEPTH) -> bool:
    return text.lstrip()[:1] in ("[", "{") and json_depth(text) > limit


def _cleaned(data: QueryDict) -> QueryDict | None:
    if not any(_CONTROL.search(v) for values in data.lists() for v in values[1] if isinstance(v, str)):
        return None
    copy = data.copy()
    for key, values in data.lists():
        copy.setlist(key, [strip_controls(v) if isinstance(v, str) else v for v in values])
    copy._mutable = False
    return copy


class SafeInputMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if request.method == "POST" and request.content_type in (
                "application/x-www-form-urlencoded", "multipart/form-data") and \
                not request.path.startswith(settings.API_PATH_PREFIXES):
            cleaned = _cleaned(request.POST)
            if cleaned is not None:
                request.POST = cleaned
            for key, values in request.POST.lists():
                if any(isinstance(v, str) and too_deep(v) for v in values):
                    return HttpResponseBadRequest(
                        f"The field “{key}” holds JSON nested deeper than {MAX_JSON_DEPTH} levels, "
                        "which is not accepted.", content_type="text/plain; charset=utf-8")
        cleaned = _cleaned(request.GET)
        if cleaned is not None:
            request.GET = cleaned
        return self.get_response(request)
