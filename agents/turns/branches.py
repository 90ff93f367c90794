"""A conversation's turns as a tree, built from rows without queries.

A turn (a trace) continues the turn its user message names (``Message.parent_turn``); turns
with no parent start the conversation. Siblings are turns that continue the same parent: an
edited message starts a sibling with another user message, a regenerated answer a sibling with
the same one. A child is always created after its parent, so ids grow along every path and the
newest turn below a node is a leaf.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class TurnNode:
    id: int
    user_message_id: int | None
    parent_id: int | None


@dataclass(frozen=True, slots=True)
class Versions:
    """Where one version sits among its alternatives: ``index`` of ``count`` (from 1), and the
    turns to show for the previous and next one (None at either end)."""

    index: int
    count: int
    previous: Any = None
    next: Any = None


class TurnTree:
    def __init__(self, nodes: Iterable[TurnNode]) -> None:
        self.nodes: dict[int, TurnNode] = {}
        for node in nodes:
            self.nodes[node.id] = node
        self.children: dict[int | None, list[int]] = {}
        for node in sorted(self.nodes.values(), key=lambda n: n.id):
            parent = node.parent_id if node.parent_id in self.nodes else None
            if parent is not None and parent >= node.id:
                parent = None  # cannot happen through the services; never loop on bad data
            self.children.setdefault(parent, []).append(node.id)

    def __contains__(self, node_id: object) -> bool:
        return node_id in self.nodes

    def parent(self, node_id: int) -> int | None:
        parent = self.nodes[node_id].parent_id
        return parent if parent in self.nodes and parent < node_id else None

    def latest(self) -> int | None:
        """The newest turn of the conversation (the leaf shown by default)."""
        return max(self.nodes, default=None)

    def latest_leaf(self, node_id: int) -> int:
        """The newest turn at or below ``node_id``: where its branch currently ends."""
        best, stack = node_id, [node_id]
        while stack:
            current = stack.pop()
            best = max(best, current)
            stack.extend(self.children.get(current, ()))
        return best

    def path(self, leaf_id: int | None) -> list[int]:
        """The turns from the conversation's start down to ``leaf_id``."""
        path: list[int] = []
        current = leaf_id if leaf_id in self.nodes else None
        while current is not None:
            path.append(current)
            current = self.parent(current)
        path.reverse()
        return path

    def siblings(self, node_id: int) -> list[int]:
        return self.children.get(self.parent(node_id), [])

    def answer_versions(self, node_id: int) -> Versions:
        """The answers to the same user message (regenerations), oldest first."""
        message = self.nodes[node_id].user_message_id
        same = [n for n in self.siblings(node_id) if self.nodes[n].user_message_id == message]
        return _versions(same, node_id)

    def message_versions(self, node_id: int) -> Versions:
        """The user messages sent at this point (edits), oldest first; each version is shown by
        its newest answer."""
        newest_by_message: dict[int | None, int] = {}
        for sibling in self.siblings(node_id):
            newest_by_message[self.nodes[sibling].user_message_id] = sibling
        order = sorted(newest_by_message, key=lambda m: (m is None, m or 0))
        turns = [newest_by_message[m] for m in order]
        mine = self.nodes[node_id].user_message_id
        return _versions(turns, newest_by_message.get(mine, node_id), current_key=order.index(mine)
                         if mine in newest_by_message else None)


def _versions(turns: list[int], current: int, *, current_key: int | None = None) -> Versions:
    if current_key is None:
        current_key = turns.index(current) if current in turns else 0
    count = len(turns) or 1
    previous = turns[current_key - 1] if current_key > 0 else None
    following = turns[current_key + 1] if current_key + 1 < len(turns) else None
    return Versions(current_key + 1, count, previous, following)
