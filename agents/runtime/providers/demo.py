"""The offline demo model: deterministic, no network, no key.

It reads the conversation and decides like a small tool-using model would:

* requests it recognises become tool calls: arithmetic -> ``calculator {expression}``, the time
  -> ``current_time {timezone?}`` (or, when an MCP time server's tool is offered, its
  ``<server>_get_current_time {timezone}``), "remember ..." -> ``memory_store {content, key?}``, "what is
  my ..." -> ``memory_recall {query}``, "forget ..." -> ``memory_forget {key}``, a URL ->
  ``http_fetch {url}``. Several requests in one message give several calls in one response;
* it calls only tools offered in the request (``request.tools``); with no native tools but a
  system prompt that asks for ``<tool_call>`` tags (prompt-guided dispatch), it writes those tags
  in its text instead, for the tools the system prompt lists;
* once the turn holds the results of its calls, it answers in plain words from them, or says
  which tool failed and why;
* "call the X tool N times" makes it call X with ``{}`` once per request until the turn holds N
  results for X, then answer "Called X N times." (for tests and benchmarks);
* "xss corpus please" (anywhere, any case) makes it answer with ``XSS_CORPUS``, hostile markup
  of every kind the chat must render inert; with current_time (or else the calculator) offered
  it first calls it with the corpus as the time zone (the expression), so the tool's arguments
  and error carry the corpus too (for the browser tests of the chat's sanitising);
* "tell me a story" or "write something long" gets ``LONG_ANSWER``: a few hundred words of
  markdown (a heading, a list, a code block), long enough to watch stream and to stop;
* otherwise it answers conversationally and says that it is the offline demo model;
* asked for a ``response_format``, its answer is JSON: ``{"answer": …}``, or an instance of the
  schema with the answer's text in its strings.

Usage is estimated as ceil(characters / 4) of the input and of the output. Like a provider with
prompt caching, it reports the part of the input that repeats the start of a request it answered
before (same provider name and model, tools then system blocks then messages) as cache reads,
taken out of the input tokens: ``demo_cache`` says how (a per-process memory, 1,024 tokens at
least, no cache writes). The ``prompt_caching`` capability turns it off. Streaming sends the
first token after ``first_token_latency_s`` and every further word piece after
``token_delay_s``; ``request_latency_s`` is added before anything. ``chat`` waits the same total
once. With every delay at 0 nothing sleeps: it is the zero-latency model of the benchmarks.
"""

from __future__ import annotations

import asyncio
import json
import math
import re
import uuid
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from ..history.tokens import IMAGE_TOKENS
from ..hooks import without_hook_feedback
from ..messages import Block, ImageBlock, Message, Role, TextBlock, ToolResultBlock, ToolUseBlock
from ..pricing import Usage
from ..trajectory import DECLINED_PREFIXES
from .base import (
    REQUEST_PARAMS,
    Capabilities,
    ChatRequest,
    ChatResponse,
    Provider,
    StreamDone,
    StreamEvent,
    StreamText,
)
from .demo_cache import MIN_TOKENS, PROMPT_CACHE, Unit, tokens_before
from .demo_intents import Call, intents

INTRO = "I'm the offline demo model"
ABILITIES = ("I can do arithmetic, tell the time, remember and recall things, and fetch web "
             "pages when those tools are enabled.")
FALLBACK_ANSWER = f"Sorry, I could not follow this conversation. ({INTRO}.)"
XSS_TRIGGER = "xss corpus please"
LONG_ANSWER = (
    "## The lighthouse keeper's log\n\n"
    "Every evening the keeper climbed the hundred and twelve steps, counted them aloud, and wrote "
    "the count in the log, because a log that says nothing happened is still a log. The sea was "
    "grey, then green, then the colour of old pewter, and the lamp turned the way it had turned "
    "for forty years. Ships passed far out, and the keeper noted each one: its lights, its "
    "heading, the hour. Nobody ever read the log, but the keeper wrote it carefully all the "
    "same.\n\n"
    "One winter the lamp's clockwork began to slow. The keeper took it apart on the kitchen "
    "table, laid every gear on a cloth in the order it came out, and found a single worn tooth. "
    "There was no spare, so the keeper filed a new one from a brass hinge, by candlelight, over "
    "three nights. These were the steps, as the log records them:\n\n"
    "1. Stop the lamp and light the storm lantern in the window.\n"
    "2. Take the clockwork out, gear by gear, and lay it down in order.\n"
    "3. Find the worn tooth, cut a blank from the hinge, file it to the pattern.\n"
    "4. Put everything back in reverse order and wind the spring.\n\n"
    "On the fourth night the lamp turned again, a little faster than before, and the keeper "
    "wrote down the new period to the second:\n\n"
    "```python\n"
    "def period(turns: int, seconds: float) -> float:\n"
    "    \"\"\"Seconds per turn of the lamp.\"\"\"\n"
    "    return seconds / turns\n"
    "\n"
    "print(period(turns=12, seconds=118.8))  # 9.9\n"
    "```\n\n"
    "In spring a fishing boat came in close, and its skipper shouted up that the light had "
    "looked different all winter, steadier somehow. The keeper said nothing about the hinge, "
    "went back up the hundred and twelve steps, and wrote in the log: *boat, close in, "
    "fine weather, nothing to report.*"
)
# Each line tries to run script or load something from another host; shown safely it is text.
XSS_CORPUS = (
    "<script>window.__pwned = 'script tag'</script>\n\n"
    "<img src=x onerror=\"window.__pwned = 'img onerror'\">\n\n"
    "[a javascript: link](javascript:window.__pwned='javascript link')\n\n"
    "<a href=\"javascript:window.__pwned='raw link'\">a raw javascript: link</a>\n\n"
    "<svg onload=\"window.__pwned='svg onload'\"><script>window.__pwned='svg script'</script></svg>\n\n"
    "![remote pixel](http://remote.invalid/pixel.png)\n\n"
    "<iframe src=\"http://remote.invalid/frame\"></iframe>\n\n"
    "<style>body { display: none }</style>\n\n"
    "[data link](data:text/html;base64,PHNjcmlwdD5hbGVydCgxKTwvc2NyaXB0Pg==)"
)

_REPEAT = re.compile(r"(?i)\bcall (?:the )?([\w-]+) tool (\d+) times?\b")
_EXPR_TOKEN = re.compile(r"\d+(?:\.\d+)?|\*\*|[-+*/%^()]")
_SIGNS = frozenset("+-")
_OPERATORS = frozenset("+-*/%^")
_SHOWN_OPERATORS = {"*": " × ", "/": " ÷ ", "^": "^"}
_NUMBER_LIKE = re.compile(r"^[-+]?[\d.,]+(?:[eE][-+]?\d+)?$")

_TIME_STAMP = re.compile(r"^\s*\[\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}(?::\d{2})?[^\]]{0,40}\]\s*")
_GREETING = re.compile(r"(?i)^\s*(?:hi|hello|hey|howdy|good (?:morning|afternoon|evening))\b")
_THANKS = re.compile(r"(?i)\b(?:thanks|thank you|cheers)\b")
_LONG = re.compile(r"(?i)\b(?:tell me a (?:long )?story|write (?:me )?(?:something|a lot|an essay|a long\b))")
_HELP = re.compile(r"(?i)\b(?:help|what can you do|who are you|what are you)\b")
_PRONOUNS = re.compile(r"(?i)\b(?:my|i'm|i am|i)\b")
_PRONOUN_SWAP = {"my": "your", "i'm": "you're", "i am": "you are", "i": "you"}
_NOTHING_FOUND = re.compile(r"(?i)^\s*(?:$|no |nothing|none|\[\]|not found)")

_TOOL_CALL_TAGS = re.compile(r"(?s)<tool_call>\s*(.*?)\s*</tool_call>")
_TOOL_RESULT_TAGS = re.compile(r"(?s)<tool_result\b([^>]*)>\n?(.*?)\n?</tool_result>")
_TAG_ATTR = re.compile(r'(\w+)="([^"]*)"')
_LISTED_TOOL = re.compile(r"\*\*([A-Za-z0-9_.-]+)\*\*")
_WORD_PIECES = re.compile(r"\S+\s*|\s+")

# Enum member lookups cost a few hundred ns each; the history scan does them per message.
_USER, _ASSISTANT, _TOOL = Role.USER, Role.ASSISTANT, Role.TOOL


@dataclass(slots=True)
class _Result:
    name: str
    output: str
    is_error: bool
    arguments: dict[str, Any] = field(default_factory=dict)


@dataclass(slots=True)
class _Turn:
    """The conversation as the demo model reads it."""

    user_text: str
    results: list[_Result]   # results of the latest round of calls in this turn
    counts: dict[str, int]   # results per tool name in this turn
    prior_calls: int         # tool calls in the whole history (for fresh ids)
    images: list[str] = field(default_factory=list)  # media types of the images attached


@dataclass(slots=True)
class _Decision:
    text: str = ""
    calls: list[Call] = field(default_factory=list)


class DemoProvider(Provider):
    kind = "demo"
    # vision: it accepts images (and says it cannot look at them), so attaching one can be tried
    default_capabilities = Capabilities(native_tool_calling=True, streaming=True, vision=True,
                                        prompt_caching=True)
    # It honours ``max_tokens``, ``stop`` and ``response_format`` (``_json_answer``); being
    # deterministic, it writes the same answer whatever the temperature, top_p, seed or
    # penalties (as a model at temperature 0 with a fixed seed would).
    request_params = frozenset(REQUEST_PARAMS)

    def __init__(self, *, token_delay_s: float = 0.0, first_token_latency_s: float = 0.0,
                 request_latency_s: float = 0.0, cache_min_tokens: int = MIN_TOKENS,
                 name: str = "demo", capabilities: dict[str, Any] | None = None) -> None:
        self.token_delay_s = max(float(token_delay_s), 0.0)
        # The shortest prompt its cache keeps (providers' 1,024 by default; the seeded demo
        # agent's is lower, so that its short prompts show cache reads).
        self.cache_min_tokens = max(int(cache_min_tokens), 1)
        self.first_token_latency_s = max(float(first_token_latency_s), 0.0)
        self.request_latency_s = max(float(request_latency_s), 0.0)
        super().__init__(name=name, capabilities=capabilities)

    def __repr__(self) -> str:
        return (f"DemoProvider(name={self.name!r}, token_delay_s={self.token_delay_s}, "
                f"first_token_latency_s={self.first_token_latency_s}, "
                f"request_latency_s={self.request_latency_s})")

    async def chat(self, request: ChatRequest) -> ChatResponse:
        response, pieces = self._respond(request)
        total = (self.request_latency_s + self.first_token_latency_s
                 + self.token_delay_s * max(len(pieces) - 1, 0))
        if total > 0:
            await asyncio.sleep(total)
        return response

    async def stream(self, request: ChatRequest) -> AsyncIterator[StreamEvent]:
        response, pieces = self._respond(request)
        if self.request_latency_s > 0:
            await asyncio.sleep(self.request_latency_s)
        if self.first_token_latency_s > 0:
            await asyncio.sleep(self.first_token_latency_s)
        for index, piece in enumerate(pieces):
            if index and self.token_delay_s > 0:
                await asyncio.sleep(self.token_delay_s)
            yield StreamText(piece)
        yield StreamDone(response)

    # -- one response -------------------------------------------------------------------------
    def _respond(self, request: ChatRequest) -> tuple[ChatResponse, list[str]]:
        native = bool(request.tools)
        system = request.system_text
        offered = ({t.name for t in request.tools or ()} if native
                   else _prompt_guided_tools(system))
        input_chars, prior_calls, units = _scan(request)
        try:
            turn = _read_turn(request.messages, prior_calls)
            decision = _decide(turn, offered)
        except Exception:  # noqa: BLE001 - the demo model never fails a turn
            turn, decision = _Turn("", [], {}, prior_calls), _Decision(FALLBACK_ANSWER)
        blocks: list[Block] = []
        text = decision.text
        if request.response_format and not decision.calls:
            text = _json_answer(text, request.response_format)
        if decision.calls and not native:
            text = _tool_call_tags(decision.calls)
        text, cut = _bounded(text, decision.calls if native else [], request)
        if cut:  # the answer ended before its calls were written
            decision.calls = []
        if text:
            blocks.append(TextBlock(text))
        if decision.calls and native:
            blocks.extend(
                ToolUseBlock(id=f"call_demo_{turn.prior_calls + i + 1}", name=c.name,
                             input=c.arguments)
                for i, c in enumerate(decision.calls))
        message = Message(_ASSISTANT, blocks)
        input_tokens = _tokens(input_chars)
        cached = 0
        if self.capabilities_for(request.model).prompt_caching:
            cached = tokens_before(PROMPT_CACHE.read((self.name, request.model or "demo"), units,
                                                     min_tokens=self.cache_min_tokens))
        usage = Usage(input_tokens=input_tokens - cached, cache_read_tokens=cached,
                      output_tokens=max(_tokens(_output_chars(message)), 1))
        message.usage = usage
        stop = cut or ("tool_use" if decision.calls and native else "end_turn")
        response = ChatResponse(message=message, usage=usage, model=request.model or "demo",
                                provider=self.name, stop_reason=stop,
                                raw={"id": f"demo-{uuid.uuid4().hex[:24]}"})
        return response, _WORD_PIECES.findall(text) if text else []


# -- reading the conversation -------------------------------------------------------------------
def _is_result_message(message: Message) -> bool:
    if message.role == _TOOL:
        return True
    if message.role != _USER:
        return False
    if message.tool_results_blocks:
        return True
    text = message.text
    return text.startswith("[Tool results]") or "<tool_result" in text


def _read_turn(messages: Sequence[Message], prior_calls: int) -> _Turn:
    start = -1
    for index in range(len(messages) - 1, -1, -1):
        message = messages[index]
        if message.role == _USER and not _is_result_message(message):
            start = index
            break
    # The loop stamps the user's message with the time ("[2026-01-02 10:00:00 UTC] hi"); the
    # model reads past it, as a real one would.
    user_text = _TIME_STAMP.sub("", messages[start].text, count=1) if start >= 0 else ""
    calls: dict[str, ToolUseBlock] = {}
    tagged: list[Call] = []
    results: list[_Result] = []
    counts: dict[str, int] = {}
    for index in range(start + 1, len(messages)):
        message = messages[index]
        if message.role == _ASSISTANT:
            uses = [b for b in message.blocks if isinstance(b, ToolUseBlock)]
            calls.update((b.id, b) for b in uses)
            if not uses:
                tagged = _parse_tool_call_tags(message.text) or tagged
            results = []
        elif _is_result_message(message):
            for result in _results_of(message, calls, tagged):
                results.append(result)
                counts[result.name] = counts.get(result.name, 0) + 1
    images = [b.media_type for b in messages[start].blocks if isinstance(b, ImageBlock)] if start >= 0 else []
    return _Turn(user_text, results, counts, prior_calls, images)


def _results_of(message: Message, calls: dict[str, ToolUseBlock],
                tagged: list[Call]) -> list[_Result]:
    found: list[_Result] = []
    for block in message.blocks:
        if isinstance(block, ToolResultBlock):
            call = calls.get(block.tool_use_id)
            name = block.name or (call.name if call else "")
            found.append(_Result(name, block.output, block.is_error,
                                 call.input if call else {}))
    if found:
        return found
    for position, match in enumerate(_TOOL_RESULT_TAGS.finditer(message.text)):
        attrs = dict(_TAG_ATTR.findall(match.group(1)))
        call = tagged[position] if position < len(tagged) else None
        name = attrs.get("name") or (call.name if call else "")
        arguments = call.arguments if call and call.name == name else {}
        found.append(_Result(name, match.group(2), attrs.get("status") == "error", arguments))
    return found


def _parse_tool_call_tags(text: str) -> list[Call]:
    calls: list[Call] = []
    if "<tool_call>" not in text:
        return calls
    for match in _TOOL_CALL_TAGS.finditer(text):
        try:
            data = json.loads(match.group(1))
        except ValueError:
            continue
        if isinstance(data, dict) and isinstance(data.get("name"), str):
            arguments = data.get("arguments")
            calls.append(Call(data["name"], arguments if isinstance(arguments, dict) else {}))
    return calls


@lru_cache(maxsize=64)
def _prompt_guided_tools(system: str) -> frozenset[str]:
    """Tools a prompt-guided system prompt offers: the ``**name**`` entries of its tool list."""
    if "<tool_call>" not in system:
        return frozenset()
    return frozenset(_LISTED_TOOL.findall(system))


# -- deciding -----------------------------------------------------------------------------------
def _decide(turn: _Turn, offered: frozenset[str] | set[str]) -> _Decision:
    text = turn.user_text
    if turn.images and not turn.results:
        kinds = ", ".join(dict.fromkeys(turn.images))
        count = len(turn.images)
        return _Decision(f"I received {count} image{'s' if count != 1 else ''} ({kinds}). I am the "
                         "offline demo model, so I cannot look at images; a model with vision "
                         "would describe them here.")
    if XSS_TRIGGER in text.lower():
        return _decide_corpus(turn, offered)
    repeat = _REPEAT.search(text)
    if repeat:
        return _decide_repeat(repeat.group(1), int(repeat.group(2)), turn, offered)
    if turn.results:
        return _Decision(_answer_from_results(turn.results))
    wanted = intents(text)
    if not wanted:
        return _Decision(_conversational(text))
    calls = [_offered_variant(c, offered) for c in wanted]
    calls = [c for c in calls if c.name in offered]
    if calls:
        return _Decision(calls=calls)
    missing = sorted({c.name for c in wanted}, key=[c.name for c in wanted].index)
    names = " and ".join(missing)
    they = "it isn't" if len(missing) == 1 else "they aren't"
    tool_word = "tool" if len(missing) == 1 else "tools"
    return _Decision(f"I'd use the {names} {tool_word} for that, but {they} available to me "
                     f"here. ({INTRO}.)")


MCP_TIME_SUFFIX = "get_current_time"


def _offered_variant(call: Call, offered: frozenset[str] | set[str]) -> Call:
    """The time from an MCP time server's tool (``<server>_get_current_time``, as
    ``mcp-server-time`` offers it) when one is offered: a team that connected a time server
    wants it asked, even beside the built-in ``current_time``."""
    if call.name != "current_time":
        return call
    name = next((n for n in sorted(offered) if n.endswith(MCP_TIME_SUFFIX)), None)
    if name is None:
        return call
    zone = call.arguments.get("timezone") or "UTC"
    return Call(name, {"timezone": zone}, call.position)


def _decide_corpus(turn: _Turn, offered: frozenset[str] | set[str]) -> _Decision:
    if turn.results:
        return _Decision(f"{XSS_CORPUS}\n\n{_answer_from_results(turn.results)}")
    # Both tools echo a bad argument in their error; the calculator refuses long ones unread.
    if "current_time" in offered:
        return _Decision(calls=[Call("current_time", {"timezone": XSS_CORPUS})])
    if "calculator" in offered:
        return _Decision(calls=[Call("calculator", {"expression": XSS_CORPUS})])
    return _Decision(XSS_CORPUS)


def _decide_repeat(tool: str, times: int, turn: _Turn,
                   offered: frozenset[str] | set[str]) -> _Decision:
    if tool not in offered:
        return _Decision(f"I can't call {tool}: it isn't among the tools offered to me.")
    if turn.counts.get(tool, 0) < times:
        return _Decision(calls=[Call(tool, {})])
    return _Decision(f"Called {tool} {times} times.")


# -- answering ----------------------------------------------------------------------------------
def _mcp_time(output: str) -> str:
    """An MCP time server answers with JSON ({"timezone", "datetime", ...}); its datetime."""
    try:
        data = json.loads(output)
    except ValueError:
        return output
    return str(data.get("datetime") or output) if isinstance(data, dict) else output


def _answer_from_results(results: Sequence[_Result]) -> str:
    return "\n".join(_answer_one(r) for r in results)


def _answer_one(result: _Result) -> str:
    # A hook's feedback on a call that worked is for the model to act on, not to quote back
    # to the person (on a failed call it is the reason, which is said).
    output = (result.output if result.is_error else without_hook_feedback(result.output)).strip()
    name = result.name or "tool"
    if result.is_error and output.startswith(DECLINED_PREFIXES):
        return f"I did not run {name}: {output.splitlines()[0].rstrip('.')}."
    if result.is_error:
        reason = output or "it gave no reason"
        return f"The {name} tool failed: {reason.rstrip('.')}."
    arguments = result.arguments
    if name == "calculator":
        shown = _pretty_expression(str(arguments.get("expression", "")))
        if shown and _NUMBER_LIKE.match(output):
            return f"{shown} = {output}."
        return f"The calculator says: {output}" if output else "The calculator returned nothing."
    if name == "current_time" or name.endswith(MCP_TIME_SUFFIX):
        output = _mcp_time(output)
        zone = arguments.get("timezone")
        where = f" in {zone}" if zone else ""
        return f"The current time{where} is {output}."
    if name == "memory_store":
        content = _swap_pronouns(str(arguments.get("content", "")).strip())
        return f"Got it, I'll remember that {content}." if content else "Saved to memory."
    if name == "memory_recall":
        query = _swap_pronouns(str(arguments.get("query", "that")))
        if _NOTHING_FOUND.match(output):
            return f"I don't have anything in memory about {query}."
        return f"Here is what I remember about {query}:\n{output}"
    if name == "memory_forget":
        key = _swap_pronouns(str(arguments.get("key", "that")).replace("_", " "))
        return f"Done, I've forgotten {key}."
    if name == "http_fetch":
        url = arguments.get("url", "the page")
        excerpt = output if len(output) <= 300 else output[:300].rstrip() + "…"
        return f"I fetched {url}. It begins:\n\n{excerpt}" if excerpt else f"{url} was empty."
    return f"The {name} tool returned: {output}" if output else f"The {name} tool returned nothing."


def _pretty_expression(expression: str) -> str:
    pieces = _EXPR_TOKEN.findall(expression.replace("**", "^"))
    out: list[str] = []
    previous = ""
    for piece in pieces:
        unary = piece in _SIGNS and (not previous or previous in _OPERATORS or previous == "(")
        if piece in _OPERATORS and not unary:
            out.append(_SHOWN_OPERATORS.get(piece, f" {piece} "))
        else:
            out.append(piece)
        previous = piece
    return "".join(out).strip()


def _swap_pronouns(text: str) -> str:
    return _PRONOUNS.sub(lambda m: _PRONOUN_SWAP[" ".join(m.group(0).lower().split())], text)


def _conversational(text: str) -> str:
    snippet = " ".join(text.split())
    if not snippet:
        return f"Hello! {INTRO}. {ABILITIES}"
    if _GREETING.match(snippet):
        return f"Hello! {INTRO}. {ABILITIES}"
    if _THANKS.search(snippet):
        return "You're welcome!"
    if _LONG.search(snippet):
        return LONG_ANSWER
    if _HELP.search(snippet):
        return f"{INTRO}: a deterministic model that runs without a network. {ABILITIES}"
    if len(snippet) > 200:
        snippet = snippet[:200].rstrip() + "…"
    return f'You said: "{snippet}". {INTRO}, so I can only reflect your message. {ABILITIES}'


def _tool_call_tags(calls: Sequence[Call]) -> str:
    return "\n".join(
        "<tool_call>\n" + json.dumps({"name": c.name, "arguments": c.arguments},
                                     ensure_ascii=False) + "\n</tool_call>"
        for c in calls)


def _json_answer(text: str, response_format: dict[str, Any]) -> str:
    """The answer as JSON, as a model asked for a format writes it: ``{"answer": text}`` for a
    JSON object; for a schema, an instance of it whose strings hold the answer's text."""
    schema = (response_format.get("json_schema") or {}).get("schema")
    value = _instance(schema, text, 0, schema) if isinstance(schema, dict) else {"answer": text}
    return json.dumps(value, ensure_ascii=False)


def _instance(schema: dict[str, Any], text: str, depth: int, root: dict[str, Any]) -> Any:
    """A value valid under the simple schemas a structured-output request sends (objects with
    properties, arrays, enums, the scalar types, ``anyOf``, ``$ref`` to ``$defs``), ``text``
    for its strings."""
    if depth > 8:
        return None
    ref = schema.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/"):
        target: Any = root
        for part in ref[2:].split("/"):
            target = target.get(part, {}) if isinstance(target, dict) else {}
        return _instance(target if isinstance(target, dict) else {}, text, depth + 1, root)
    if "const" in schema:
        return schema["const"]
    if schema.get("enum"):
        return schema["enum"][0]
    for key in ("anyOf", "oneOf"):
        if schema.get(key):
            return _instance(schema[key][0], text, depth + 1, root)
    kind = schema.get("type", "object")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    if kind == "object":
        properties = schema.get("properties") or {}
        return {name: _instance(sub if isinstance(sub, dict) else {}, text, depth + 1, root)
                for name, sub in properties.items()}
    if kind == "array":
        items = schema.get("items") if isinstance(schema.get("items"), dict) else {}
        return [_instance(items, text, depth + 1, root) for _ in range(max(int(schema.get("minItems") or 1), 1))]
    if kind == "integer":
        return int(schema.get("minimum") or 0)
    if kind == "number":
        return float(schema.get("minimum") or 0)
    if kind == "boolean":
        return True
    if kind == "null":
        return None
    return text


# -- usage --------------------------------------------------------------------------------------
def _bounded(text: str, calls: list[Call], request: ChatRequest) -> tuple[str, str | None]:
    """The answer as a model bound by the request writes it, and why it was cut: before the
    first of its ``stop`` sequences ("stop_sequence"), else at about ``max_tokens`` tokens of
    text and calls ("max_tokens"). None: written whole."""
    found = [at for at in (text.find(s) for s in request.stop or () if s) if at >= 0]
    if found:
        return text[:min(found)], "stop_sequence"
    limit = request.max_tokens
    calls_chars = sum(len(c.name) + len(str(c.arguments)) for c in calls)
    if not limit or _tokens(len(text) + calls_chars) <= limit:
        return text, None
    kept = ""
    for piece in _WORD_PIECES.findall(text):
        if _tokens(len(kept) + len(piece)) > limit:
            break
        kept += piece
    return kept or text[:limit * 4], "max_tokens"


def _tokens(chars: int) -> int:
    return math.ceil(chars / 4) if chars > 0 else 0


def _block_chars(block: Block) -> int:
    if isinstance(block, TextBlock):
        return len(block.text)
    if isinstance(block, ToolUseBlock):
        return len(block.name) + len(str(block.input))
    if isinstance(block, ToolResultBlock):
        return len(block.output)
    if isinstance(block, ImageBlock):
        return IMAGE_TOKENS * 4  # counted like a typical image
    return len(block.thinking)


def _scan(request: ChatRequest) -> tuple[int, int, list[Unit]]:
    """Characters of the whole input (for usage), the tool calls in the history (for ids) and
    the request's units in the order providers cache them (for ``demo_cache``)."""
    units: list[Unit] = []
    for tool in request.tools or ():
        parameters = str(tool.parameters)
        units.append((hash(("tool", tool.name, tool.description, parameters)),
                      len(tool.name) + len(tool.description) + len(parameters)))
    for block in request.system:
        units.append((hash(("system", block.text)), len(block.text)))
    calls = 0
    for message in request.messages:
        role = message.role.value
        for block in message.blocks:
            units.append((hash((role, _block_key(block))), _block_chars(block)))
            if isinstance(block, ToolUseBlock):
                calls += 1
    return sum(chars for _, chars in units), calls, units


def _block_key(block: Block) -> tuple[str, ...]:
    if isinstance(block, TextBlock):
        return ("text", block.text)
    if isinstance(block, ToolUseBlock):
        return ("tool_use", block.id or "", block.name, str(block.input))
    if isinstance(block, ToolResultBlock):
        return ("tool_result", block.tool_use_id or "", block.output, str(block.is_error))
    if isinstance(block, ImageBlock):
        return ("image", block.media_type, block.attachment, str(hash(block.data)))
    return ("thinking", block.thinking)


def _output_chars(message: Message) -> int:
    return sum(_block_chars(b) for b in message.blocks)
