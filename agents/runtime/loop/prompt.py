"""The system prompt of each request, in blocks ordered so providers can cache a prefix.

First what stays the same for many turns (the agent's prompt, the answer's format a request
asked for, the tool section), then the
history's own system messages, then what changes: the date and time, memory, the previous
turn's trajectory state, this turn's latest state when injected, and loop-detection notices.
"""

from __future__ import annotations

from datetime import datetime

from ..providers.base import SystemBlock
from ..trajectory import TrajectoryState, trajectory_state_prompt_block
from .types import TurnConfig


class SystemPrompt:
    def __init__(self, cfg: TurnConfig, *, tool_section: str, now: datetime,
                 zone_key: str) -> None:
        self.cfg = cfg
        # Written by the current dispatcher; replaced when a hook moves the turn to another model.
        self.tool_section = tool_section
        # Fixed for the turn: the clock is read once, so every request shows the same time.
        self.dynamic = SystemBlock(_dynamic_text(cfg, now, zone_key))
        self.state_block: SystemBlock | None = None
        # Loop-detection warnings for the next request only; cleared once a request succeeds.
        self.notices: list[str] = []

    def blocks(self, system_messages: list[str], *, with_tools: bool) -> list[SystemBlock]:
        blocks: list[SystemBlock] = []
        if self.cfg.system_prompt:
            blocks.append(SystemBlock(self.cfg.system_prompt, cacheable=True))
        if self.cfg.answer_instructions:
            blocks.append(SystemBlock(self.cfg.answer_instructions, cacheable=True))
        if with_tools and self.tool_section:
            blocks.append(SystemBlock(self.tool_section, cacheable=True))
        blocks.extend(SystemBlock(text) for text in system_messages)
        blocks.append(self.dynamic)
        if self.state_block is not None:
            blocks.append(self.state_block)
        blocks.extend(SystemBlock(notice) for notice in self.notices)
        return blocks


def _dynamic_text(cfg: TurnConfig, now: datetime, zone_key: str) -> str:
    parts = [f"## Current Date & Time\n\n{now:%Y-%m-%d %H:%M:%S %Z} ({now:%A}), "
             f"time zone {zone_key}"]
    if cfg.memory_context.strip():
        parts.append(cfg.memory_context.strip())
    previous = cfg.previous_trajectory_state
    if previous is not None:
        if isinstance(previous, dict):
            previous = TrajectoryState.from_dict(previous)
        parts.append(trajectory_state_prompt_block(
            previous, title="Trajectory state at the end of the previous turn"))
    return "\n\n".join(parts)
