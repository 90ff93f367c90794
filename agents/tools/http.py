"""HTTP tools: ``http_fetch`` (GET any public URL) and the HTTP tools a team defines in the admin.

URL templates. A template is a full ``http://`` or ``https://`` URL whose path and query may
hold placeholders such as ``{city}``, filled from the call's arguments. The scheme, host and port
are fixed by the template and can never come from an argument: placeholders are not allowed
before the path, every value is percent-encoded as one component (``/ ? # & = @ :`` and dots
included), and the filled URL is checked to have the template's origin. Arguments that fill no
placeholder go to the query string (GET, DELETE) or to a JSON body (POST, PUT, PATCH).

Headers. A tool's headers (name/value pairs, often credentials) are stored encrypted in
``Tool.headers_encrypted`` as a JSON list. They are decrypted only to build the tool for a turn,
sent only to the template's origin (dropped on a redirect elsewhere), and their values are
removed from anything the tool returns, so they never reach the model, a trace or a page.

Trace context. While a turn that is traced runs the tool, the request carries the call's W3C
``traceparent`` header (``agents.runtime.tracecontext``), so the team's API can join its spans
to the turn's trace under the call's step. It replaces a ``traceparent`` header the admin gave
the tool (names compare case-insensitively): a fixed value would name the same parent for every
call. Like the tool's own headers, it goes only to the template's origin. ``http_fetch`` sends
none: it reaches any public site, which has no use for the team's trace ids.

Every request goes through the SSRF guard (``agents.tools.net``) with the tool's time limit and
response size limit.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import httpx

from agents.runtime.scrub import scrub_secrets
from agents.runtime.tools import Tool, ToolError, ToolResult
from agents.runtime.tracecontext import current_trace_context
from agentsite.crypto import decrypt, encrypt

from .context import ToolContext
from .net import FetchResult, address_problem, parse_ip

METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE")
BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})
# Requests that only read: such a tool may run again when a turn resumes, whatever its row says.
READ_METHODS = frozenset({"GET", "HEAD"})
PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")
REDACTED = "[REDACTED]"
TRACE_HEADERS = ("traceparent", "tracestate")  # W3C trace context, lower case
FETCH_TIMEOUT_S = 15.0
FETCH_MAX_BYTES = 200_000


class TemplateError(ValueError):
    """A URL template that cannot be used; the message says why."""


# -- URL templates --------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class UrlTemplate:
    template: str
    origin: tuple[str, str, int | None]
    placeholders: tuple[str, ...]

    @classmethod
    def parse(cls, template: str) -> UrlTemplate:
        text = (template or "").strip()
        scheme, sep, rest = text.partition("://")
        if not sep or scheme.lower() not in ("http", "https"):
            raise TemplateError("The URL template must start with http:// or https://.")
        authority = re.split(r"[/?#]", rest, maxsplit=1)[0]
        if "{" in authority or "}" in authority or "{" in scheme:
            raise TemplateError(
                "The scheme and host of a URL template are fixed: placeholders such as {city} "
                "may only appear in the path or the query, after the host.")
        if not authority:
            raise TemplateError("The URL template has no host.")
        leftover = PLACEHOLDER.sub("", text)
        if "{" in leftover or "}" in leftover:
            raise TemplateError("The URL template has a brace that is not a placeholder: write "
                                "placeholders as {name} with letters, digits and _ only.")
        try:
            url = httpx.URL(PLACEHOLDER.sub("x", text))
        except (httpx.InvalidURL, ValueError) as exc:
            raise TemplateError(f"The URL template is not a valid URL: {exc}.") from exc
        if not url.host:
            raise TemplateError("The URL template has no host.")
        if url.userinfo:
            raise TemplateError("Put credentials in the headers, not in the URL.")
        names = tuple(dict.fromkeys(PLACEHOLDER.findall(text)))
        return cls(text, _origin(url), names)

    def fill(self, arguments: dict[str, Any]) -> str:
        missing = [name for name in self.placeholders if arguments.get(name) is None]
        if missing:
            fills = ", ".join("{" + n + "}" for n in missing)
            raise ToolError(f"Missing argument(s) {', '.join(missing)}: they fill {fills} in the "
                            "URL. Call the tool again with them.")
        url = PLACEHOLDER.sub(lambda m: _encode(arguments[m.group(1)]), self.template)
        try:
            filled = httpx.URL(url)
        except (httpx.InvalidURL, ValueError) as exc:
            raise ToolError(f"The arguments do not make a valid URL: {exc}.") from exc
        if _origin(filled) != self.origin:  # cannot happen with encoded values; checked anyway
            raise ToolError("The arguments would change the URL's host, which is not allowed.")
        return url


def _origin(url: httpx.URL) -> tuple[str, str, int | None]:
    return url.scheme, url.host.lower(), url.port


def _encode(value: Any) -> str:
    if isinstance(value, bool):
        text = "true" if value else "false"
    elif isinstance(value, (dict, list)):
        text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    else:
        text = str(value)
    if text in (".", ".."):  # a dot segment would climb the template's path
        return text.replace(".", "%2E")
    return quote(text, safe="")


def template_problem(template: str) -> str | None:
    """Why ``template`` cannot be used (including a literal address tools may not reach), or
    None. Host names are resolved only when the tool runs."""
    try:
        parsed = UrlTemplate.parse(template)
    except TemplateError as exc:
        return str(exc)
    ip = parse_ip(parsed.origin[1])
    if ip is not None:
        problem = address_problem(ip)
        if problem:
            return f"Requests to {ip} would be refused: it is {problem}."
    return None


# -- headers --------------------------------------------------------------------------------------
def headers_encrypt(pairs: list[tuple[str, str]]) -> str:
    return encrypt(json.dumps([[n, v] for n, v in pairs])) if pairs else ""


def headers_decrypt(token: str) -> list[tuple[str, str]]:
    """The stored pairs; ``agentsite.crypto.SecretUnreadable`` when the key changed."""
    if not token:
        return []
    data = json.loads(decrypt(token))
    return [(str(n), str(v)) for n, v in data]


def redact(text: str, secrets: list[str]) -> str:
    for secret in sorted(secrets, key=len, reverse=True):
        if len(secret) >= 4:
            text = text.replace(secret, REDACTED)
    return scrub_secrets(text)


# -- results --------------------------------------------------------------------------------------
def format_result(result: FetchResult, *, max_bytes: int) -> str:
    lines = [f"Status: {result.status} {result.reason}".rstrip(),
             f"Content-Type: {result.content_type or 'unknown'}"]
    if result.redirects:
        lines.append(f"Final URL: {result.url}")
    if result.is_binary:
        note = " (at least)" if result.truncated else ""
        body = f"[binary content, {len(result.body):,} bytes{note}, not shown]"
    else:
        body = result.text()
        if result.truncated:
            body += f"\n[truncated: the response is longer than the tool's limit of {max_bytes:,} bytes]"
    return "\n".join(lines) + "\n\n" + body


def _result(result: FetchResult, *, max_bytes: int, secrets: list[str]) -> ToolResult:
    output = redact(format_result(result, max_bytes=max_bytes), secrets)
    if result.status >= 400:
        return ToolResult.fail(f"HTTP {result.status} {result.reason}".rstrip(), output)
    return ToolResult.ok(output)


# -- the tools ------------------------------------------------------------------------------------
class HttpFetchTool(Tool):
    name = "http_fetch"
    description = ("Fetch a public web page or API with GET and return its status, content type "
                   "and text. Private and internal addresses are refused.")
    parameters = {  # noqa: RUF012
        "type": "object",
        "properties": {"url": {"type": "string", "minLength": 1, "maxLength": 2000,
                               "description": "An http:// or https:// URL."}},
        "required": ["url"],
    }
    idempotent = True  # GET only
    tool_type = "extension"

    def __init__(self, context: ToolContext, *, timeout_s: float = FETCH_TIMEOUT_S,
                 max_bytes: int = FETCH_MAX_BYTES) -> None:
        self.context = context
        self.timeout_s = timeout_s
        self.max_bytes = max_bytes

    async def execute(self, arguments: dict[str, Any]) -> ToolResult:
        url = str(arguments.get("url") or "").strip()
        result = await self.context.fetcher.fetch("GET", url, timeout_s=self.timeout_s,
                                                  max_bytes=self.max_bytes)
        return _result(result, max_bytes=self.max_bytes, secrets=[])


class HttpTool(Tool):
    """An HTTP tool defined in the admin."""

    tool_type = "extension"

    def __init__(self, *, name: str, description: str, parameters: dict[str, Any], method: str,
                 url_template: str, headers: list[tuple[str, str]], timeout_s: float,
                 max_bytes: int, context: ToolContext, idempotent: bool = False) -> None:
        self.name = name
        self.description = description
        self.parameters = parameters
        self.method = method.upper() if method.upper() in METHODS else "GET"
        self.idempotent = self.method in READ_METHODS or idempotent
        self.template = UrlTemplate.parse(url_template)
        self.headers = dict(headers)
        self.timeout_s = timeout_s
        self.max_bytes = max_bytes
        self.context = context

    async def execute(self, arguments: dict[str, Any]) -> ToolResult:
        url = self.template.fill(arguments)
        rest = {k: v for k, v in arguments.items() if k not in self.template.placeholders}
        params = json_body = None
        if rest and self.method in BODY_METHODS:
            json_body = rest
        elif rest:
            params = {k: _encode_param(v) for k, v in rest.items()}
        secrets = list(self.headers.values())
        try:
            result = await self.context.fetcher.fetch(
                self.method, url, headers=with_trace_context(self.headers), params=params,
                json=json_body, timeout_s=self.timeout_s, max_bytes=self.max_bytes)
        except ToolError as exc:
            raise ToolError(redact(str(exc), secrets), retryable=exc.retryable) from None
        return _result(result, max_bytes=self.max_bytes, secrets=secrets)


def with_trace_context(headers: dict[str, str]) -> dict[str, str]:
    """``headers`` with the current tool call's ``traceparent`` (and ``tracestate``), which
    replace any of the same names; ``headers`` as they are outside a traced call."""
    context = current_trace_context()
    if not context:
        return headers
    kept = {n: v for n, v in headers.items() if n.lower() not in TRACE_HEADERS}
    return {**kept, **context}


def _encode_param(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (dict, list)):
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    return str(value)
