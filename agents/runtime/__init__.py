"""The agent runtime: plain, typed, async Python with no Django imports.

The public names below are loaded on first use, so importing one runtime module (say
``agents.runtime.messages``) does not import the loop and everything it depends on.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

_EXPORTS: dict[str, str] = {
    # loop
    "ApprovalDecision": "loop",
    "ApprovalRequest": "loop",
    "Approver": "loop",
    "CompactionInfo": "loop",
    "CompactionSettings": "loop",
    "LlmCall": "loop",
    "LlmCallDecision": "loop",
    "LoopDetector": "loop",
    "TurnConfig": "loop",
    "TurnHooks": "loop",
    "TurnResult": "loop",
    "TurnStatus": "loop",
    "run_turn": "loop",
    # cancellation
    "CancelToken": "cancel",
    "TurnCancelled": "cancel",
    # dispatch
    "NativeToolDispatcher": "dispatch",
    "ToolDispatcher": "dispatch",
    "XmlToolDispatcher": "dispatch",
    "select_dispatcher": "dispatch",
    # trajectory states
    "TrajectoryState": "trajectory",
    "build_trajectory_state": "trajectory",
    "trajectory_state_prompt_block": "trajectory",
    # built-in tools
    "CalculatorTool": "builtin",
    "CurrentTimeTool": "builtin",
    "builtin_tools": "builtin",
    # core types
    "Message": "messages",
    "Role": "messages",
    "TextBlock": "messages",
    "ThinkingBlock": "messages",
    "ToolResultBlock": "messages",
    "ToolUseBlock": "messages",
    "Usage": "pricing",
    "Price": "pricing",
    "cost_usd": "pricing",
    "Tool": "tools",
    "ToolError": "tools",
    "ToolResult": "tools",
    "ToolSpec": "tools",
    "FunctionTool": "tools",
    "Observer": "events",
    "RecordingObserver": "events",
    "Provider": "providers.base",
    "ProviderError": "providers.base",
}

__all__ = [
    "ApprovalDecision",
    "ApprovalRequest",
    "Approver",
    "CalculatorTool",
    "CancelToken",
    "CompactionInfo",
    "CompactionSettings",
    "CurrentTimeTool",
    "FunctionTool",
    "LlmCall",
    "LlmCallDecision",
    "LoopDetector",
    "Message",
    "NativeToolDispatcher",
    "Observer",
    "Price",
    "Provider",
    "ProviderError",
    "RecordingObserver",
    "Role",
    "TextBlock",
    "ThinkingBlock",
    "Tool",
    "ToolDispatcher",
    "ToolError",
    "ToolResult",
    "ToolResultBlock",
    "ToolSpec",
    "ToolUseBlock",
    "TrajectoryState",
    "TurnCancelled",
    "TurnConfig",
    "TurnHooks",
    "TurnResult",
    "TurnStatus",
    "Usage",
    "XmlToolDispatcher",
    "build_trajectory_state",
    "builtin_tools",
    "cost_usd",
    "run_turn",
    "select_dispatcher",
    "trajectory_state_prompt_block",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


if TYPE_CHECKING:
    from .builtin import CalculatorTool, CurrentTimeTool, builtin_tools
    from .cancel import CancelToken, TurnCancelled
    from .dispatch import NativeToolDispatcher, ToolDispatcher, XmlToolDispatcher, select_dispatcher
    from .events import Observer, RecordingObserver
    from .loop import (
        ApprovalDecision,
        ApprovalRequest,
        Approver,
        CompactionInfo,
        CompactionSettings,
        LlmCall,
        LlmCallDecision,
        LoopDetector,
        TurnConfig,
        TurnHooks,
        TurnResult,
        TurnStatus,
        run_turn,
    )
    from .messages import Message, Role, TextBlock, ThinkingBlock, ToolResultBlock, ToolUseBlock
    from .pricing import Price, Usage, cost_usd
    from .providers.base import Provider, ProviderError
    from .tools import FunctionTool, Tool, ToolError, ToolResult, ToolSpec
    from .trajectory import TrajectoryState, build_trajectory_state, trajectory_state_prompt_block
