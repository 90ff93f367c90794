"""The memory tools: ``memory_store``, ``memory_recall`` and ``memory_forget``.

Each is built for one turn and bound to its ``MemoryOwner`` (team, agent, user, conversation,
and the end user of an API key the conversation is for). Their arguments say only *what* to
store, find or forget, never *whose*: a model cannot reach another team's, agent's, user's or
end user's memory by any argument it passes.
"""

from __future__ import annotations

import re
from typing import Any

from django.core.exceptions import ValidationError

from agents.runtime.tools import Tool, ToolError, ToolResult
from memory import services as memory
from memory.models import MemoryEntry

from .context import ToolContext

Scope = MemoryEntry.Scope
RECALL_ENTRY_CHARS = 2_000
_SLUG = re.compile(r"[^a-z0-9]+")

STORE_PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "content": {"type": "string", "minLength": 1, "maxLength": memory.MAX_CONTENT_CHARS,
                    "description": "The fact to remember, as a full sentence."},
        "key": {"type": "string", "maxLength": 100,
                "description": "A short name for it, e.g. favourite_colour. Storing again under "
                               "the same key replaces the entry. Default: made from the content."},
        "scope": {"type": "string", "enum": [Scope.USER.value, Scope.CONVERSATION.value],
                  "description": "user (default): remember it about this user in every "
                                 "conversation; conversation: only for this conversation."},
        "category": {"type": "string", "enum": ["core", "daily", "conversation"],
                     "description": "Default: core."},
    },
    "required": ["content"],
}
RECALL_PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "query": {"type": "string", "maxLength": 1000,
                  "description": "Words to look for; empty lists the newest memories."},
        "limit": {"type": "integer", "minimum": 1, "maximum": 20,
                  "description": "How many entries at most (default: the agent's recall limit)."},
    },
    "required": ["query"],
}
FORGET_PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "key": {"type": "string", "minLength": 1, "maxLength": memory.MAX_KEY_CHARS,
                "description": "The key of the memory to delete (memory_recall shows keys)."},
    },
    "required": ["key"],
}


def key_from_content(content: str) -> str:
    """A key for content stored without one: its first words, as a slug."""
    words = _SLUG.sub(" ", content.lower()).split()[:6]
    return "_".join(words)[:64] or "note"


class _MemoryTool(Tool):
    tool_type = "datastore"

    def __init__(self, context: ToolContext) -> None:
        if context.agent_id is None:
            raise ValueError("memory tools need an agent")
        self.context = context
        self.owner = memory.MemoryOwner(team_id=context.team_id, agent_id=context.agent_id,
                                        user_id=context.user_id,
                                        conversation_id=context.conversation_id,
                                        end_user=context.end_user)

    async def _db(self, fn: Any, **kwargs: Any) -> Any:
        try:
            return await self.context.db(fn, **kwargs)
        except ValidationError as exc:
            raise ToolError(" ".join(exc.messages)) from exc


class MemoryStoreTool(_MemoryTool):
    name = "memory_store"
    description = ("Save a fact to long-term memory so it can be recalled in later "
                   "conversations, e.g. the user's preferences, names and decisions.")
    parameters = STORE_PARAMETERS

    async def execute(self, arguments: dict[str, Any]) -> ToolResult:
        content = str(arguments.get("content", "")).strip()
        key = str(arguments.get("key") or "").strip() or key_from_content(content)
        scope = arguments.get("scope") or Scope.USER
        entry = await self._db(memory.memory_store, owner=self.owner, key=key, content=content,
                               scope=scope, category=arguments.get("category") or "core",
                               source_trace_id=self.context.trace_id)
        where = "for this conversation" if entry.scope == Scope.CONVERSATION else "about this user"
        return ToolResult.ok(f"Saved to memory {where} under the key '{entry.key}'.")


class MemoryRecallTool(_MemoryTool):
    name = "memory_recall"
    description = ("Search long-term memory (what this agent remembers about the user, this "
                   "conversation and in general). Returns the matching entries, best first.")
    parameters = RECALL_PARAMETERS
    idempotent = True

    async def execute(self, arguments: dict[str, Any]) -> ToolResult:
        query = str(arguments.get("query") or "")
        limit = arguments.get("limit") or self.context.memory_recall_limit
        found = await self._db(memory.memory_recall, owner=self.owner, query=query, limit=limit,
                               min_relevance=self.context.memory_min_relevance)
        if not found:
            return ToolResult.ok(f"No memories match “{query.strip()}”." if query.strip()
                                 else "No memories are stored yet.")
        lines = []
        for recalled in found:
            content = recalled.entry.content
            if len(content) > RECALL_ENTRY_CHARS:
                content = content[:RECALL_ENTRY_CHARS].rstrip() + "..."
            lines.append(f"- {recalled.entry.key}: {content}")
        return ToolResult.ok("\n".join(lines))


class MemoryForgetTool(_MemoryTool):
    name = "memory_forget"
    description = "Delete a memory by its key (memory_recall shows the keys)."
    parameters = FORGET_PARAMETERS

    async def execute(self, arguments: dict[str, Any]) -> ToolResult:
        key = str(arguments.get("key") or "").strip()
        deleted = await self._db(memory.memory_forget, owner=self.owner, key=key)
        if not deleted:
            raise ToolError(f"Nothing is stored under the key '{key}'. Use memory_recall to find "
                            "the right key.")
        return ToolResult.ok(f"Forgot the memory '{key}'.")
