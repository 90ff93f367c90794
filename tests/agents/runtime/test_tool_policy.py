"""The per-tool policy (allow / ask / deny) and the before/after tool hooks in the loop, with
real shell commands as hooks (Claw Code's contract)."""

from __future__ import annotations

import json
import sys
from typing import Any

import pytest

from agents.runtime.events import (
    ApprovalRequested,
    HookRan,
    RecordingObserver,
    ToolFinished,
    ToolPolicyDecided,
)
from agents.runtime.hooks import CommandHook, HookRun, ToolHooks
from agents.runtime.loop import ApprovalRequest, TurnConfig, run_turn
from agents.runtime.messages import Role
from agents.runtime.tools import FunctionTool, Tool

from .scripted_provider import FakeScriptedProvider, answer, calls


def counting_tool(name: str, runs: list[dict[str, Any]], *, policy: str = "allow",
                  reason: str = "", output: str = "4") -> Tool:
    async def run(arguments: dict[str, Any]) -> str:
        runs.append(arguments)
        return output

    tool = FunctionTool(name, f"The {name} tool.", run, policy=policy)
    tool.policy_reason = reason
    return tool


async def turn(tools: list[Tool], *, tool_hooks: ToolHooks | None = None, approver: Any = None,
               script: list | None = None):
    provider = FakeScriptedProvider(script or [calls(("calc", {"expression": "2+2"})), answer("done")])
    observer = RecordingObserver()
    result = await run_turn(provider=provider, config=TurnConfig(model="m"), history=[],
                            user_message="hi", tools=tools, observer=observer,
                            approver=approver, tool_hooks=tool_hooks)
    results = [b for m in result.history if m.role is Role.TOOL for b in m.tool_results_blocks]
    return result, observer, results


class Yes:
    def __init__(self) -> None:
        self.asked: list[str] = []

    async def request(self, call: ApprovalRequest) -> bool:
        self.asked.append(call.name)
        return True


async def test_a_denied_tool_never_runs_and_the_model_reads_permission_denied():
    runs: list[dict] = []
    tool = counting_tool("calc", runs, policy="deny", reason="the agent's policy for calc is deny")
    _, observer, results = await turn([tool])
    assert runs == []
    assert results[0].is_error
    assert results[0].output == "Permission denied: the agent's policy for calc is deny"
    decided = observer.of(ToolPolicyDecided)[0]
    assert (decided.policy, decided.outcome) == ("deny", "deny")
    assert not observer.of(ApprovalRequested)


async def test_an_ask_tool_is_put_to_a_person_and_an_allow_tool_is_not():
    runs: list[dict] = []
    approver = Yes()
    script = [calls(("calc", {"expression": "1"}), ("free", {})), answer("done")]
    _, observer, results = await turn([counting_tool("calc", runs, policy="ask"),
                                       counting_tool("free", runs)],
                                      approver=approver, script=script)
    assert approver.asked == ["calc"]
    assert len(runs) == 2 and not any(r.is_error for r in results)
    outcomes = {e.name: e.outcome for e in observer.of(ToolPolicyDecided)}
    assert outcomes == {"calc": "ask", "free": "allow"}


def command(script: str, **kwargs: Any) -> CommandHook:
    return CommandHook(command=script, name=kwargs.pop("name", script[:20]), **kwargs)


async def test_a_before_hook_that_exits_2_denies_with_its_stdout_as_the_reason():
    runs: list[dict] = []
    hooks = ToolHooks(pre=[command("printf 'no maths on Sundays'; exit 2", name="sunday")])
    _, observer, results = await turn([counting_tool("calc", runs)], tool_hooks=hooks)
    assert runs == []
    assert results[0].is_error
    assert results[0].output.startswith("Permission denied: no maths on Sundays")
    ran = observer.of(HookRan)
    assert [(h.hook, h.event, h.decision, h.tool) for h in ran] == [
        ("sunday", "PreToolUse", "deny", "calc")]
    assert observer.of(ToolPolicyDecided)[0].source == "hook"


async def test_a_failing_hook_only_warns_and_the_call_runs():
    runs: list[dict] = []
    hooks = ToolHooks(pre=[command("printf 'audit log is full'; exit 1", name="audit")])
    _, observer, results = await turn([counting_tool("calc", runs)], tool_hooks=hooks)
    assert len(runs) == 1
    assert not results[0].is_error
    assert results[0].output == "4\n\nHook feedback:\naudit log is full"
    assert observer.of(HookRan)[0].decision == "failed"


async def test_hooks_receive_claw_codes_payload_and_environment(tmp_path):
    seen = tmp_path / "seen.json"
    script = (f"{sys.executable} -c \"import json,os,sys; d=json.load(sys.stdin); "
              f"d['env']={{k: os.environ[k] for k in os.environ if k.startswith('HOOK_')}}; "
              f"open({str(seen)!r}, 'a').write(json.dumps(d) + chr(10))\"")
    runs: list[dict] = []
    hooks = ToolHooks(pre=[command(script, name="spy")], post=[command(script, name="spy")])
    await turn([counting_tool("calc", runs)], tool_hooks=hooks)
    pre, post = (json.loads(line) for line in seen.read_text().splitlines())
    assert pre["hook_event_name"] == "PreToolUse" and post["hook_event_name"] == "PostToolUse"
    assert pre["tool_name"] == "calc" and pre["tool_input"] == {"expression": "2+2"}
    assert json.loads(pre["tool_input_json"]) == {"expression": "2+2"}
    assert pre["tool_output"] is None and post["tool_output"] == "4"
    assert pre["tool_result_is_error"] is False
    assert pre["env"]["HOOK_EVENT"] == "PreToolUse" and pre["env"]["HOOK_TOOL_NAME"] == "calc"
    assert pre["env"]["HOOK_TOOL_IS_ERROR"] == "0"
    assert json.loads(pre["env"]["HOOK_TOOL_INPUT"]) == {"expression": "2+2"}
    assert post["env"]["HOOK_TOOL_OUTPUT"] == "4"


async def test_the_models_arguments_never_reach_the_command_line(tmp_path):
    marker = tmp_path / "pwned"
    runs: list[dict] = []
    hooks = ToolHooks(pre=[command("cat >/dev/null; exit 0", name="quiet")])
    script = [calls(("calc", {"expression": f"$(touch {marker})"})), answer("done")]
    await turn([counting_tool("calc", runs)], tool_hooks=hooks, script=script)
    assert not marker.exists()


async def test_an_after_hook_adds_its_message_and_a_matcher_picks_the_tools():
    runs: list[dict] = []
    hooks = ToolHooks(post=[command("printf 'checked by policy bot'", matcher="calc|other"),
                            command("printf 'never'", matcher="weather*")])
    _, observer, results = await turn([counting_tool("calc", runs)], tool_hooks=hooks)
    assert results[0].output == "4\n\nHook feedback:\nchecked by policy bot"
    assert len(observer.of(HookRan)) == 1


class FakeOverrideHook:
    """A fake hook (the edge: a team's webhook) that answers with a permission decision."""

    name, kind = "override", "webhook"

    def __init__(self, decision: str) -> None:
        self.decision = decision

    def matches(self, tool_name: str) -> bool:
        return True

    async def run(self, event: str, payload: dict[str, Any]) -> HookRun:
        return HookRun(hook=self.name, kind=self.kind, event=event,
                       permission_override=self.decision, permission_reason="hook says so")


@pytest.mark.parametrize(("policy", "override", "outcome", "ran"), [
    ("deny", "allow", "deny", 0),   # a hook's allow never lifts a deny
    ("allow", "deny", "deny", 0),
    ("allow", "ask", "ask", 1),     # approved by the approver below
    ("ask", "allow", "ask", 1),     # ask from the policy still asks
])
async def test_a_hooks_permission_override_follows_claw_codes_order(policy, override, outcome, ran):
    runs: list[dict] = []
    approver = Yes()
    _, observer, _ = await turn([counting_tool("calc", runs, policy=policy)],
                                tool_hooks=ToolHooks(pre=[FakeOverrideHook(override)]), approver=approver)
    assert observer.of(ToolPolicyDecided)[0].outcome == outcome
    assert len(runs) == ran
    assert (approver.asked == ["calc"]) == (outcome == "ask")


@pytest.mark.timeout(20)  # a hang guard: the hook would sleep 30 s
async def test_a_hook_that_hangs_is_killed_at_its_time_limit():
    runs: list[dict] = []
    hooks = ToolHooks(pre=[CommandHook(command="sleep 30", name="slow", timeout_s=0.5)])
    _, observer, results = await turn([counting_tool("calc", runs)], tool_hooks=hooks)
    assert observer.of(HookRan)[0].decision == "failed"
    assert len(runs) == 1 and "did not finish within 0.5s" in results[0].output
    assert observer.of(ToolFinished)[0].success


async def test_a_before_hook_command_can_rewrite_the_arguments_claude_code_style():
    runs: list[dict] = []
    answer = json.dumps({"hookSpecificOutput": {"hookEventName": "PreToolUse",
                                                "updatedInput": {"expression": "2*2"}}})
    hooks = ToolHooks(pre=[command(f"printf '%s' '{answer}'", name="rewriter")])
    _, observer, results = await turn([counting_tool("calc", runs)], tool_hooks=hooks)
    assert runs == [{"expression": "2*2"}] and not results[0].is_error
    assert observer.of(ToolFinished)[0].meta["arguments_rewritten"] == '{"expression": "2*2"}'
    # an answer that only rewrote the call is no feedback for the model to read (or to quote)
    assert results[0].output == "4"
