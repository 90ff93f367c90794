"""A fake model at the LLM edge: it answers from a script and records every request."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

from agents.runtime.messages import Block, Message, Role, TextBlock, ToolUseBlock
from agents.runtime.pricing import Usage
from agents.runtime.providers.base import (
    ChatRequest,
    ChatResponse,
    Provider,
    StreamDone,
    StreamEvent,
    StreamText,
)


def answer(text: str, *, usage: Usage | None = None) -> ChatResponse:
    usage = usage or Usage(input_tokens=10, output_tokens=5)
    return ChatResponse(message=Message(Role.ASSISTANT, [TextBlock(text)] if text else []),
                        usage=usage, model="fake-model", provider="fake", stop_reason="end_turn")


def calls(*items: tuple[str, dict[str, Any]] | tuple[str, dict[str, Any], str], text: str = "",
          usage: Usage | None = None) -> ChatResponse:
    """A native tool-call response; each item is (name, arguments[, id])."""
    blocks: list[Block] = [TextBlock(text)] if text else []
    for index, item in enumerate(items):
        name, arguments = item[0], item[1]
        call_id = item[2] if len(item) > 2 else f"toolu_{index + 1}"
        blocks.append(ToolUseBlock(id=call_id, name=name, input=arguments))
    return ChatResponse(message=Message(Role.ASSISTANT, blocks),
                        usage=usage or Usage(input_tokens=10, output_tokens=5),
                        model="fake-model", provider="fake", stop_reason="tool_use")


@dataclass
class Stall:
    """Stream ``pieces``, then hang (or wait ``seconds`` and finish with ``then``)."""

    pieces: list[str] = field(default_factory=list)
    seconds: float | None = None
    then: ChatResponse | None = None


ScriptItem = ChatResponse | Exception | Stall | Callable[[ChatRequest], Any]


class FakeScriptedProvider(Provider):
    kind = "fake"

    def __init__(self, script: list[ScriptItem], *, native: bool = True,
                 repeat_last: bool = False) -> None:
        super().__init__(name="fake", capabilities={"native_tool_calling": native,
                                                    "streaming": True})
        self.script = list(script)
        self.repeat_last = repeat_last
        self.requests: list[ChatRequest] = []
        self.streams_opened = 0
        self.streams_closed = 0

    def _next(self, request: ChatRequest) -> Any:
        self.requests.append(request)
        if not self.script:
            raise AssertionError("the script has no more responses")
        item = self.script[0] if (self.repeat_last and len(self.script) == 1) else self.script.pop(0)
        if callable(item) and not isinstance(item, ChatResponse | Exception | Stall):
            item = item(request)
        return item

    async def chat(self, request: ChatRequest) -> ChatResponse:
        item = self._next(request)
        if isinstance(item, Exception):
            raise item
        if isinstance(item, Stall):
            await asyncio.sleep(item.seconds if item.seconds is not None else 3600)
            assert item.then is not None
            return item.then
        return item

    async def stream(self, request: ChatRequest) -> AsyncIterator[StreamEvent]:
        item = self._next(request)
        self.streams_opened += 1
        try:
            if isinstance(item, Exception):
                raise item
            if isinstance(item, Stall):
                for piece in item.pieces:
                    yield StreamText(piece)
                await asyncio.sleep(item.seconds if item.seconds is not None else 3600)
                assert item.then is not None
                item = item.then
            for piece in re.findall(r"\S+\s*|\s+", item.text):
                yield StreamText(piece)
            yield StreamDone(item)
        finally:
            self.streams_closed += 1
