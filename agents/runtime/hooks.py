"""Hooks around tool calls (Claw Code's PreToolUse / PostToolUse) and around messages
(ZeroClaw's ``on_message_received`` / ``on_message_sending``).

A hook is anything with a ``name``, a ``kind``, ``matches(tool_name)`` and an async
``run(event, payload) -> HookRun``. Two kinds exist: ``CommandHook`` here (an operator's shell
command, Claw Code's contract: JSON on stdin, ``HOOK_*`` in the environment, exit 0 allow, 2 deny,
anything else failed) and the team's webhooks, which the Django side builds (they need the
outbound-network policy). ``run_hooks`` runs the matching hooks of one event in order, stopping
at the first that denies, fails or is cancelled, and returns Claw Code's ``HookRunResult``.

The payload a tool hook receives is always ``hook_payload(...)``:
``{hook_event_name, tool_name, tool_input, tool_input_json, tool_output, tool_result_is_error}``.
Untrusted text (the model's arguments, the tool's output) only ever travels in the payload and
the environment, never in the command line.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from .scrub import scrub_secrets

PRE_TOOL_USE = "PreToolUse"
POST_TOOL_USE = "PostToolUse"
POST_TOOL_USE_FAILURE = "PostToolUseFailure"
MESSAGE_RECEIVED = "on_message_received"
MESSAGE_SENDING = "on_message_sending"
TOOL_EVENTS = (PRE_TOOL_USE, POST_TOOL_USE, POST_TOOL_USE_FAILURE)
PREVIEW_CHARS = 160
# What a hook may print or answer before the rest is cut off.
MAX_HOOK_OUTPUT_CHARS = 20_000


@dataclass(slots=True)
class HookRun:
    """One hook's answer to one event.

    ``outcome``: "allow", "deny", "failed" or "cancelled". ``messages`` are what it said (a
    deny's reason, a warning, feedback for the model). ``warn`` marks an allow that carries a
    warning. ``content`` is a message hook's rewritten text (None: unchanged)."""

    hook: str
    kind: str
    event: str
    outcome: str = "allow"
    messages: list[str] = field(default_factory=list)
    warn: bool = False
    permission_override: str | None = None
    permission_reason: str | None = None
    updated_input: str | None = None
    content: str | None = None
    duration_ms: float = 0.0
    detail: str = ""  # exit status, HTTP status … for the trace

    @property
    def decision(self) -> str:
        """The word the trace shows: allow, warn, deny or failed/cancelled."""
        if self.outcome == "allow" and self.warn:
            return "warn"
        return self.outcome


class Hook(Protocol):
    name: str
    kind: str

    def matches(self, tool_name: str) -> bool: ...

    async def run(self, event: str, payload: dict[str, Any]) -> HookRun: ...


@dataclass(slots=True)
class HookRunResult:
    """Claw Code's ``HookRunResult`` (the conformance vectors' shape), with the runs."""

    denied: bool = False
    failed: bool = False
    cancelled: bool = False
    messages: list[str] = field(default_factory=list)
    permission_override: str | None = None
    permission_reason: str | None = None
    updated_input: str | None = None
    runs: list[HookRun] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"denied": self.denied, "failed": self.failed, "cancelled": self.cancelled,
                "messages": list(self.messages), "permission_override": self.permission_override,
                "permission_reason": self.permission_reason, "updated_input": self.updated_input}


# -- matching and payloads ----------------------------------------------------------------------
def _wildcard(pattern: str, text: str) -> bool:
    """Case-insensitive match where ``*`` stands for any run of characters."""
    pattern, text = pattern.lower(), text.lower()
    parts = pattern.split("*")
    if len(parts) == 1:
        return pattern == text
    if not text.startswith(parts[0]) or not text.endswith(parts[-1]):
        return False
    position = len(parts[0])
    end = len(text) - len(parts[-1])
    for part in parts[1:-1]:
        found = text.find(part, position, end)
        if found < 0:
            return False
        position = found + len(part)
    return position <= end


def matcher_matches(matcher: str | None, tool_name: str) -> bool:
    """Claw Code's matcher: none means every tool; else split on ``,`` and ``|``; ``*`` matches
    everything; otherwise case-insensitive equality with ``*`` wildcards."""
    if matcher is None or not matcher.strip():
        return True
    for raw in matcher.replace("|", ",").split(","):
        part = raw.strip()
        if not part:
            continue
        if part == "*" or _wildcard(part, tool_name):
            return True
    return False


def parse_tool_input(tool_input_json: str) -> Any:
    try:
        return json.loads(tool_input_json)
    except (TypeError, ValueError):
        return {"raw": tool_input_json}


def hook_payload(event: str, tool_name: str, tool_input_json: str, tool_output: str | None = None,
                 is_error: bool = False) -> dict[str, Any]:
    payload: dict[str, Any] = {
        "hook_event_name": event, "tool_name": tool_name,
        "tool_input": parse_tool_input(tool_input_json), "tool_input_json": tool_input_json,
        "tool_output": tool_output, "tool_result_is_error": is_error,
    }
    if event == POST_TOOL_USE_FAILURE:
        payload["tool_error"] = tool_output
        payload["tool_result_is_error"] = True
    return payload


def message_payload(event: str, content: str, *, agent: str = "", conversation: str = "",
                    sender: str = "") -> dict[str, Any]:
    """What a message hook receives."""
    return {"hook_event_name": event, "content": content, "agent": agent,
            "conversation": conversation, "sender": sender}


def merge_hook_feedback(messages: Sequence[str], output: str, is_error: bool) -> str:
    """Claw Code's ``merge_hook_feedback``: hook messages appended to a tool's output."""
    if not messages:
        return output
    label = "Hook feedback (error)" if is_error else "Hook feedback"
    sections = [output] if output.strip() else []
    sections.append(f"{label}:\n" + "\n".join(messages))
    return "\n\n".join(sections)


def without_hook_feedback(output: str) -> str:
    """A tool's output without the hooks' feedback ``merge_hook_feedback`` appended to it
    (what the tool itself said)."""
    for label in ("Hook feedback:\n", "Hook feedback (error):\n"):
        if output.startswith(label):
            return ""
        output = output.split("\n\n" + label, 1)[0]
    return output


def preview(text: str) -> str:
    escaped = text.replace("\\", "\\\\").replace("\n", "\\n").replace("\r", "\\r").replace("\t", "\\t")
    return escaped if len(escaped) <= PREVIEW_CHARS else escaped[:PREVIEW_CHARS] + "…"


def rewrite_meta(arguments: str) -> dict[str, str]:
    """The arguments a hook rewrote a call to, for its step (the model's own are its payload),
    scrubbed and cut."""
    return {"arguments_rewritten": scrub_secrets(arguments)[:4000]}


def rewritten_arguments(name: str, updated_input: str,
                        problem_of: Callable[[dict[str, Any]], str | None]) -> tuple[dict[str, Any], str | None]:
    """The arguments a PreToolUse hook rewrote a call of tool ``name`` to (its ``updatedInput``),
    and why the tool refuses them (``problem_of``, the tool's ``arguments_problem``; None when
    it takes them): the call then does not run, and the model and the step read why."""
    try:
        value = json.loads(updated_input)
    except ValueError:
        value = None
    if not isinstance(value, dict):
        return {}, f"A PreToolUse hook rewrote the arguments of '{name}' into something that is not a JSON object."
    problem = problem_of(value)
    if problem is not None:
        return value, (f"A PreToolUse hook rewrote the arguments of '{name}' into ones it refuses: "
                       f"{problem}.")
    return value, None


# -- reading an answer --------------------------------------------------------------------------
def read_hook_stdout(run: HookRun, stdout: str, *, command: str, tool_name: str,
                     stderr: str = "") -> None:
    """Claw Code's stdout parsing into ``run``: a JSON object gives messages from
    ``systemMessage``, ``reason`` and ``hookSpecificOutput.additionalContext``, a permission
    decision and ``updatedInput``; ``continue: false`` or ``decision: "block"`` denies. Other
    text is itself the message; broken JSON fails the hook."""
    text = stdout.strip()
    if not text:
        return
    try:
        value = json.loads(text)
    except ValueError as exc:
        if text.startswith(("{", "[")):
            run.outcome = "failed"
            run.messages.append(
                f"hook_invalid_json: phase={run.event} tool={tool_name} command={preview(command)} "
                f"detail={exc} stdout_preview={preview(stdout)} stderr_preview={preview(stderr)}")
            return
        run.messages.append(text)
        return
    if not isinstance(value, dict):
        run.outcome = "failed"
        run.messages.append(
            f"hook_invalid_json: phase={run.event} tool={tool_name} command={preview(command)} "
            f"detail=expected a JSON object stdout_preview={preview(stdout)} "
            f"stderr_preview={preview(stderr)}")
        return
    found: list[str] = []
    for key in ("systemMessage", "reason"):
        if isinstance(value.get(key), str) and value[key].strip():
            found.append(value[key])
    specific = value.get("hookSpecificOutput")
    if isinstance(specific, dict):
        if isinstance(specific.get("additionalContext"), str) and specific["additionalContext"].strip():
            found.append(specific["additionalContext"])
        decision = specific.get("permissionDecision")
        if decision in ("allow", "deny", "ask"):
            run.permission_override = decision
        if isinstance(specific.get("permissionDecisionReason"), str):
            run.permission_reason = specific["permissionDecisionReason"]
        if "updatedInput" in specific:
            run.updated_input = json.dumps(specific["updatedInput"], sort_keys=True,
                                           separators=(",", ":"))
    if value.get("continue") is False or value.get("decision") == "block":
        run.outcome = "deny"
    if isinstance(value.get("content"), str):
        run.content = value["content"]
    # Claw Code makes the raw stdout the message when the object has none; an answer that
    # decided something (a permission, new arguments, a block, new content) said all it had
    # to, and its JSON is no feedback for the model to read (or to quote back).
    acted = (run.permission_override is not None or run.updated_input is not None
             or run.outcome == "deny" or run.content is not None)
    run.messages.extend(found or ([] if acted else [text]))


# -- an operator's command ----------------------------------------------------------------------
@dataclass(slots=True)
class CommandHook:
    """An operator's shell command (never a team's): run through ``sh -lc`` with the payload on
    stdin and ``HOOK_EVENT``, ``HOOK_TOOL_NAME``, ``HOOK_TOOL_INPUT``, ``HOOK_TOOL_IS_ERROR``
    (and ``HOOK_TOOL_OUTPUT`` after a call) in its environment. Exit 0 allows, 2 denies (stdout
    the reason), anything else fails; past ``timeout_s`` it is killed and counts as failed."""

    command: str
    name: str = ""
    matcher: str | None = None
    timeout_s: float = 10.0
    env: dict[str, str] = field(default_factory=dict)
    kind: str = "command"

    def matches(self, tool_name: str) -> bool:
        return matcher_matches(self.matcher, tool_name)

    async def run(self, event: str, payload: dict[str, Any]) -> HookRun:
        run = HookRun(hook=self.name or self.command, kind=self.kind, event=event)
        tool_name = str(payload.get("tool_name") or "")
        environment = {**os.environ, **self.env, "HOOK_EVENT": event, "HOOK_TOOL_NAME": tool_name}
        if event in TOOL_EVENTS:
            environment["HOOK_TOOL_INPUT"] = str(payload.get("tool_input_json") or "")
            environment["HOOK_TOOL_IS_ERROR"] = "1" if payload.get("tool_result_is_error") else "0"
            if event != PRE_TOOL_USE and payload.get("tool_output") is not None:
                environment["HOOK_TOOL_OUTPUT"] = str(payload["tool_output"])
        else:
            environment["HOOK_MESSAGE"] = str(payload.get("content") or "")
        started = time.perf_counter()
        try:
            process = await asyncio.create_subprocess_exec(
                "sh", "-lc", self.command, stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=environment,
                start_new_session=True)
        except OSError as exc:
            run.outcome = "failed"
            run.messages.append(f"{event} hook `{self.command}` failed to start for `{tool_name}`: {exc}")
            return run
        try:
            stdout_b, stderr_b = await asyncio.wait_for(
                process.communicate(json.dumps(payload).encode()), timeout=self.timeout_s)
        except TimeoutError:
            _kill(process)
            await process.wait()
            run.outcome = "failed"
            run.detail = "timeout"
            run.messages.append(f"Hook `{self.command}` did not finish within {self.timeout_s:g}s")
            run.duration_ms = (time.perf_counter() - started) * 1000
            return run
        except asyncio.CancelledError:
            _kill(process)
            run.outcome = "cancelled"
            raise
        run.duration_ms = (time.perf_counter() - started) * 1000
        stdout = stdout_b.decode(errors="replace")[:MAX_HOOK_OUTPUT_CHARS]
        stderr = stderr_b.decode(errors="replace")[:MAX_HOOK_OUTPUT_CHARS]
        code = process.returncode
        run.detail = f"exit {code}"
        if code == 0:
            read_hook_stdout(run, stdout, command=self.command, tool_name=tool_name, stderr=stderr)
        elif code == 2:
            run.outcome = "deny"
            read_hook_stdout(run, stdout, command=self.command, tool_name=tool_name, stderr=stderr)
            if run.outcome == "failed":
                return run
            run.outcome = "deny"
            if not run.messages:
                run.messages.append(f"{event} hook denied tool `{tool_name}`")
        else:
            read_hook_stdout(run, stdout, command=self.command, tool_name=tool_name, stderr=stderr)
            run.outcome = "failed"
            if not run.messages:
                status = (f"status {code}" if code is not None and code >= 0
                          else f"signal {-(code or 0)}")
                run.messages.append(f"Hook `{self.command}` exited with {status}"
                                    + (f": {stderr.strip()}" if stderr.strip() else ""))
        return run


def _kill(process: asyncio.subprocess.Process) -> None:
    try:
        os.killpg(process.pid, 9)
    except (ProcessLookupError, PermissionError):
        pass


# -- running an event's hooks -------------------------------------------------------------------
async def run_hooks(hooks: Sequence[Hook], event: str, payload: dict[str, Any], *,
                    tool_name: str = "") -> HookRunResult:
    """The matching hooks of ``event`` in order; deny, fail and cancel stop the rest."""
    result = HookRunResult()
    for hook in hooks:
        if tool_name and not hook.matches(tool_name):
            continue
        try:
            run = await hook.run(event, payload)
        except asyncio.CancelledError:
            result.cancelled = True
            raise
        except Exception as exc:  # noqa: BLE001 - a broken hook fails, never crashes the turn
            run = HookRun(hook=getattr(hook, "name", "hook"), kind=getattr(hook, "kind", ""),
                          event=event, outcome="failed", messages=[f"Hook failed: {exc}"])
        result.runs.append(run)
        result.messages.extend(run.messages)
        if run.permission_override is not None:
            result.permission_override = run.permission_override
        if run.permission_reason is not None:
            result.permission_reason = run.permission_reason
        if run.updated_input is not None:
            result.updated_input = run.updated_input
        if run.outcome == "deny":
            result.denied = True
            break
        if run.outcome == "failed":
            result.failed = True
            break
        if run.outcome == "cancelled":
            result.cancelled = True
            break
    return result


@dataclass(slots=True)
class ToolHooks:
    """The hooks of one turn's tool calls: ``pre`` before each call (may deny it), ``post``
    after it (may add a message or a warning; a failed call's post hooks see
    ``PostToolUseFailure``)."""

    pre: Sequence[Hook] = ()
    post: Sequence[Hook] = ()
