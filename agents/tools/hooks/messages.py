"""Message hooks (ZeroClaw's ``on_message_received`` / ``on_message_sending``): what a person
sent before the model reads it, and the reply before it is stored and shown.

Each hook of the event runs in order on the text as the previous one left it. A hook may let it
through, rewrite it (its answer's ``content``), or deny it: a denied received message is
*dropped* (the model is never asked; the person sees the reason), a denied reply is
*suppressed* (no answer text is stored; the trace keeps the original). The first deny stops the
rest. A hook that fails (no answer, a bad one, a command that exits with another code) only
warns: the text goes on unchanged by it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from agents.runtime.events import HookRan
from agents.runtime.hooks import (
    MAX_HOOK_OUTPUT_CHARS,
    MESSAGE_RECEIVED,
    Hook,
    HookRun,
    message_payload,
)
from agents.runtime.scrub import scrub_secrets

Emit = Callable[[Any], Awaitable[None]]
MAX_MESSAGE_CHARS = MAX_HOOK_OUTPUT_CHARS  # a rewritten text is cut to this
PREVIEW_CHARS = 200


@dataclass(slots=True)
class MessageVerdict:
    """What the hooks of one message event decided. ``action``: "continue", "rewrite",
    "drop" (received) or "suppress" (sending); ``text``: the text to go on with; ``reason``:
    why it was dropped or suppressed; ``warnings``: what failed hooks said."""

    action: str = "continue"
    text: str = ""
    reason: str = ""
    warnings: list[str] = field(default_factory=list)
    runs: list[HookRun] = field(default_factory=list)

    @property
    def stopped(self) -> bool:
        return self.action in ("drop", "suppress")


def _clip(text: str) -> str:
    return text if len(text) <= PREVIEW_CHARS else text[:PREVIEW_CHARS] + "…"


async def message_hooks_run(hooks: Sequence[Hook], *, event: str, text: str, emit: Emit | None = None,
                            iteration: int = 0, agent: str = "", conversation: str = "",
                            sender: str = "") -> MessageVerdict:
    """Run ``hooks`` for ``event`` on ``text``; each run is emitted as a ``HookRan``."""
    verdict = MessageVerdict(text=text)
    stop_word = "drop" if event == MESSAGE_RECEIVED else "suppress"
    for hook in hooks:
        payload = message_payload(event, verdict.text, agent=agent, conversation=conversation,
                                  sender=sender)
        try:
            run = await hook.run(event, payload)
        except Exception as exc:  # noqa: BLE001 - a broken hook warns, never ends the turn
            run = HookRun(hook=getattr(hook, "name", "hook"), kind=getattr(hook, "kind", ""),
                          event=event, outcome="failed", messages=[f"Hook failed: {exc}"])
        verdict.runs.append(run)
        decision = run.decision
        notes = list(run.messages)
        if run.outcome in ("deny", "cancelled"):
            verdict.action = stop_word
            verdict.reason = "\n".join(run.messages) or f"`{run.hook}` stopped it"
            decision = stop_word
        elif run.outcome == "failed":
            verdict.warnings.extend(run.messages)
        elif run.content is not None and run.content != verdict.text:
            before = verdict.text
            verdict.text = run.content[:MAX_MESSAGE_CHARS]
            verdict.action = "rewrite"
            decision = "rewrite"
            notes.append(f"Rewrote the text ({len(before)} → {len(verdict.text)} characters): "
                         f"{_clip(verdict.text)}")
        if emit is not None:
            await emit(HookRan(iteration=iteration, event=event, hook=run.hook, hook_kind=run.kind,
                               decision=decision, messages=[scrub_secrets(m) for m in notes],
                               duration_ms=run.duration_ms, detail=run.detail))
        if verdict.stopped:
            break
    return verdict
