"""Approvals: a tool that ``requires_approval`` runs only once someone says yes.

The ``Approver`` (a person behind the UI, or a policy) is asked with a time limit; no approver,
a timeout or a broken approver mean no, and a cancelled turn stops waiting.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from ..cancel import CancelToken, StepTimedOut, TurnCancelled, guarded
from ..events import ApprovalDecided, ApprovalRequested, Observer
from ..messages import ToolUseBlock

DENIED_OUTPUT = "Denied by user."
DECLINED = "Declined by "


def declined_output(name: str, reason: str) -> str:
    """What the model reads for a call that did not run for want of approval. A person's "no" is
    their decision, not a failure: the model is told not to try it again."""
    if reason.lower().startswith(DECLINED.lower()):
        head = reason[:1].upper() + reason[1:] + "."
        why = "The person chose not to let this call run."
    elif reason == "timeout":
        head, why = "Not approved in time.", "No one decided within the approval time limit."
    elif reason == "denied":
        return DENIED_OUTPUT
    else:
        head, why = f"Not approved ({reason}).", "The call could not be put to a person."
    return (f"{head}\n{why} Do not call {name} again for this request: answer with what you "
            "know, or ask the person how to go on.")


@dataclass(slots=True)
class ApprovalRequest:
    call_id: str
    name: str
    arguments: dict[str, Any]
    iteration: int
    timeout_s: float


@dataclass(frozen=True, slots=True)
class ApprovalDecision:
    approved: bool
    reason: str = ""


@runtime_checkable
class Approver(Protocol):
    async def request(self, call: ApprovalRequest) -> bool | ApprovalDecision: ...


async def ask_approval(approver: Approver | None, call: ToolUseBlock, iteration: int, *,
                       timeout_s: float, cancel: CancelToken | None,
                       observer: Observer) -> ApprovalDecision:
    """Whether ``call`` may run and why; both the question and the answer are reported."""
    await observer.emit(ApprovalRequested(iteration=iteration, call_id=call.id, name=call.name,
                                          arguments=call.input, timeout_s=timeout_s))
    started = time.perf_counter()
    approved, reason = False, "no approver"
    if approver is not None:
        request = ApprovalRequest(call.id, call.name, call.input, iteration, timeout_s)
        try:
            decision = await guarded(approver.request(request), cancel=cancel, limit_s=timeout_s)
        except TurnCancelled:
            await observer.emit(ApprovalDecided(
                iteration=iteration, call_id=call.id, name=call.name, approved=False,
                reason="cancelled", waited_ms=(time.perf_counter() - started) * 1000))
            raise
        except StepTimedOut:
            reason = "timeout"
        except Exception as exc:  # noqa: BLE001 - a broken approver denies, never crashes
            reason = f"error: {exc}"
        else:
            if isinstance(decision, ApprovalDecision):
                approved = decision.approved
                reason = decision.reason or ("approved" if approved else "denied")
            else:
                approved = bool(decision)
                reason = "approved" if approved else "denied"
    await observer.emit(ApprovalDecided(iteration=iteration, call_id=call.id, name=call.name,
                                        approved=approved, reason=reason,
                                        waited_ms=(time.perf_counter() - started) * 1000))
    return ApprovalDecision(approved, reason)
