"""Agents and their versions: save an agent keeping a version of every change, check its
configuration, compare two versions field by field, revert to one."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from django.core.exceptions import FieldDoesNotExist, ValidationError
from django.core.serializers.json import DjangoJSONEncoder
from django.db import models, transaction

from agents.models import Agent, AgentVersion, Provider, Tool, ToolPolicy
from agentsite.audit import audit_record
from agentsite.audit import snapshot as audit_snapshot
from agentsite.diffs import unified_lines
from agentsite.models import AuditEvent

# -- configuration: agents and their versions ----------------------------------------------------
# Fields of an agent that are not its configuration (identity, ownership, bookkeeping).
_NOT_CONFIG = {"id", "uuid", "team", "provider", "created_at", "updated_at", "version"}


def _config_fields() -> list[Any]:
    return [f for f in Agent._meta.concrete_fields if f.name not in _NOT_CONFIG]


def _snapshot_value(field: Any, value: Any) -> Any:
    if value is None:
        return None
    if isinstance(field, models.DecimalField):
        # The same amount reads back from the database with all its decimal places; compare
        # like with like so that saving an unchanged form keeps no new version.
        return str(Decimal(value).quantize(Decimal(1).scaleb(-field.decimal_places)))
    return value


def agent_snapshot(agent: Agent) -> dict[str, Any]:
    """The agent's configuration as plain JSON (for ``AgentVersion``): every config field, the
    provider by name and the tools by name. No secrets: a provider's key is not part of it."""
    data = {f.name: _snapshot_value(f, getattr(agent, f.attname)) for f in _config_fields()}
    data["provider"] = agent.provider.name if agent.provider_id else None
    data["tools"] = sorted(agent.tools.values_list("name", flat=True)) if agent.pk else []
    return json.loads(json.dumps(data, cls=DjangoJSONEncoder))


def _with_defaults(snap: dict[str, Any]) -> dict[str, Any]:
    """A kept snapshot with the fields added since it was taken at their defaults, so a new
    field (such as the tool policies) is no change by itself."""
    missing = {f.name: _snapshot_value(f, f.get_default()) for f in _config_fields()
               if f.name not in snap}
    if not missing:
        return snap
    return {**json.loads(json.dumps(missing, cls=DjangoJSONEncoder)), **snap}


def agent_config_check(*, agent: Agent, tools: list[Tool] | None = None) -> None:
    """Raise ``ValidationError`` when the agent would link to another team's objects."""
    errors: dict[str, list[str]] = {}
    if agent.provider_id is not None:
        provider_team = Provider.objects.filter(pk=agent.provider_id).values_list("team_id", flat=True).first()
        if provider_team != agent.team_id:
            errors["provider"] = ["Choose a provider of the agent's own team."]
    if tools is not None and any(t.team_id != agent.team_id for t in tools):
        errors["tools"] = ["Choose tools of the agent's own team only."]
    policy_problem = _tool_policies_problem(agent)
    if policy_problem:
        errors["tool_policies"] = [policy_problem]
    entries = agent.fallbacks if isinstance(agent.fallbacks, list) else None
    if entries is None:
        errors["fallbacks"] = ["Fallbacks must be a list."]
    else:
        names = {str(e.get("provider", "")) for e in entries if isinstance(e, dict)}
        known = set(Provider.objects.filter(team_id=agent.team_id, name__in=names)
                    .values_list("name", flat=True))
        unknown = sorted(names - known)
        if unknown or any(not isinstance(e, dict) for e in entries):
            errors["fallbacks"] = [
                "Every fallback must name a provider of the agent's team"
                + (f"; unknown: {', '.join(unknown)}." if unknown else ".")]
    if agent.pk is not None:
        stored_team = Agent.objects.filter(pk=agent.pk).values_list("team_id", flat=True).first()
        if stored_team is not None and stored_team != agent.team_id:
            errors["team"] = ["An agent cannot move to another team."]
    if errors:
        raise ValidationError(errors)


def _tool_policies_problem(agent: Agent) -> str:
    policies = agent.tool_policies
    if not isinstance(policies, dict):
        return "Tool policies must map tool names to allow, ask or deny."
    if not policies:
        return ""
    allowed = {c.value for c in ToolPolicy}
    bad = sorted(str(n) for n, v in policies.items() if v not in allowed)
    if bad:
        return f"Choose allow, ask or deny as the policy of {', '.join(bad)}."
    known = set(Tool.objects.filter(team_id=agent.team_id, name__in=list(policies))
                .values_list("name", flat=True))
    unknown = sorted(str(n) for n in policies if n not in known)
    if unknown:
        return (f"Tool policies can only name tools of the agent's own team; unknown: "
                f"{', '.join(unknown)}.")
    return ""


@transaction.atomic
def agent_save(*, agent: Agent, tools: Iterable[Tool] | None = None, user: Any = None) -> AgentVersion | None:
    """Save the agent (and set its tools when given). When its configuration differs from the
    last kept version, keep a new immutable ``AgentVersion`` and raise ``Agent.version`` to its
    number; return that version, or None when nothing changed."""
    tool_list = list(tools) if tools is not None else None
    agent_config_check(agent=agent, tools=tool_list)
    if agent.pk is not None:
        # One save at a time per agent, so version numbers never collide.
        stored = Agent.objects.select_for_update().select_related("provider").get(pk=agent.pk)
        if not stored.versions.exists():
            # An agent made before versions were kept: its current state becomes the baseline,
            # under the number traces already recorded for it.
            AgentVersion.objects.create(agent=stored, number=stored.version,
                                        snapshot=agent_snapshot(stored), created_by=None)
    agent.save()
    if tool_list is not None:
        agent.tools.set(tool_list)
    return _agent_version_keep(agent=agent, user=user)


def _agent_version_keep(*, agent: Agent, user: Any) -> AgentVersion | None:
    current = agent_snapshot(agent)
    latest = agent.versions.order_by("-number").first()
    if latest is not None and _with_defaults(latest.snapshot) == current:
        return None
    number = latest.number + 1 if latest is not None else agent.version or 1
    version = AgentVersion.objects.create(
        agent=agent, number=number, snapshot=current,
        created_by=user if getattr(user, "is_authenticated", False) else None)
    Agent.objects.filter(pk=agent.pk).update(version=number)
    agent.version = number
    return version


@dataclass(frozen=True)
class FieldDiff:
    """One field that differs between two versions. ``kind`` says how to show it: "text" has
    unified-diff ``lines`` as (tag, text) pairs, "list" has ``added``/``removed``, "policies"
    (the agent's own tool policies) one sentence per tool whose policy changed in ``notes``,
    "value" just ``before``/``after`` (already formatted for reading)."""

    name: str
    label: str
    kind: str
    before: str = ""
    after: str = ""
    lines: tuple[tuple[str, str], ...] = ()
    added: tuple[str, ...] = ()
    removed: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()


_TEXT_FIELDS = {"system_prompt", "description"}
_SET_FIELDS = {"tools", "allowed_models"}


def _field_label(name: str) -> str:
    try:
        return str(Agent._meta.get_field(name).verbose_name).capitalize()
    except FieldDoesNotExist:
        return name.replace("_", " ").capitalize()


def _field_order() -> list[str]:
    names = [f.name for f in _config_fields() if f.name != "tool_policies"]
    return [names[0], "provider", *names[1:], "tools", "tool_policies"]


def _policy_text(value: Any) -> str:
    try:
        return str(ToolPolicy(value).label).lower()
    except ValueError:
        return str(value)


def _policies_diff(name: str, a: Any, b: Any) -> FieldDiff:
    a, b = a or {}, b or {}
    notes = []
    for tool in sorted(set(a) | set(b)):
        old, new = a.get(tool), b.get(tool)
        if old != new:
            before = _policy_text(old) if old else "team default"
            after = _policy_text(new) if new else "team default"
            notes.append(f"{tool}: {before} → {after}")
    return FieldDiff(name, "Tool policies (this agent)", "policies",
                     before=version_value_text(name, a), after=version_value_text(name, b),
                     notes=tuple(notes))


def version_value_text(name: str, value: Any) -> str:
    """A snapshot value as a person reads it."""
    if value is None or value == "":
        return "—"
    if isinstance(value, bool):
        return "on" if value else "off"
    if name == "fallbacks" and isinstance(value, list):
        return "\n".join(f"{e.get('provider', '')} / {e.get('model', '')}" if isinstance(e, dict)
                         else str(e) for e in value) or "—"
    if isinstance(value, list):
        return ", ".join(str(v) for v in value) or "—"
    if name == "tool_policies" and isinstance(value, dict):
        return "\n".join(f"{tool}: {_policy_text(policy)}" for tool, policy in sorted(value.items())) \
            or "— (team defaults)"
    if isinstance(value, dict):
        return json.dumps(value, sort_keys=True)
    return str(value)


def agent_version_diff(*, old: AgentVersion | dict[str, Any], new: AgentVersion | dict[str, Any]) -> list[FieldDiff]:
    """The fields that differ from ``old`` to ``new``, in form order. Long texts (the system
    prompt, the description) come as a unified line diff; tools and allowed models as what was
    added and removed."""
    before = old.snapshot if isinstance(old, AgentVersion) else old
    after = new.snapshot if isinstance(new, AgentVersion) else new
    order = _field_order()
    names = [n for n in order if n in before or n in after]
    names += sorted((set(before) | set(after)) - set(order))
    diffs: list[FieldDiff] = []
    for name in names:
        a, b = before.get(name), after.get(name)
        if name == "tool_policies" and (a or {}) == (b or {}):
            continue  # versions kept before the field existed had none
        if a == b:
            continue
        label = _field_label(name)
        if name == "tool_policies" and isinstance(a or {}, dict) and isinstance(b or {}, dict):
            diffs.append(_policies_diff(name, a, b))
        elif name in _TEXT_FIELDS:
            diffs.append(FieldDiff(name, label, "text", lines=unified_lines(str(a or ""), str(b or ""))))
        elif name in _SET_FIELDS and isinstance(a or [], list) and isinstance(b or [], list):
            a_set, b_set = [str(v) for v in a or []], [str(v) for v in b or []]
            diffs.append(FieldDiff(
                name, label, "list", before=version_value_text(name, a), after=version_value_text(name, b),
                added=tuple(v for v in b_set if v not in a_set),
                removed=tuple(v for v in a_set if v not in b_set)))
        else:
            diffs.append(FieldDiff(name, label, "value", before=version_value_text(name, a),
                                   after=version_value_text(name, b)))
    return diffs


@dataclass
class RevertResult:
    """What ``agent_revert`` did: the new version (None when the agent already matched) and what
    of the old configuration could not be restored, in plain sentences."""

    version: AgentVersion | None
    missing_tools: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


def agent_revert(*, agent: Agent, version: AgentVersion, user: Any) -> RevertResult:
    """Make the agent's configuration what ``version`` recorded, as a new version (history is
    never rewritten). Tools, a provider or fallback providers that no longer exist are reported
    in the result, not silently dropped; the rest is restored. Writes an audit row."""
    if version.agent_id != agent.pk:
        raise ValidationError("That version belongs to another agent.")
    with transaction.atomic():
        agent = Agent.objects.select_for_update().select_related("team", "provider").get(pk=agent.pk)
        before = audit_snapshot(agent)
        snap = version.snapshot
        result = RevertResult(version=None)
        for f in _config_fields():
            if f.name in snap:
                setattr(agent, f.attname, f.to_python(snap[f.name]))
        _revert_provider(agent, snap, result)
        _revert_fallbacks(agent, result)
        tools = _revert_tools(agent, snap, result)
        _revert_tool_policies(agent, snap, tools)
        try:
            agent.full_clean()
        except ValidationError as exc:
            raise ValidationError(
                f"Version {version.number} cannot be restored as it was: "
                f"{' '.join(exc.messages)}") from exc
        result.version = agent_save(agent=agent, tools=tools, user=user)
        audit_record(actor=user, action=AuditEvent.Action.UPDATE, instance=agent, before=before,
                     after=audit_snapshot(agent))
    return result


def _revert_provider(agent: Agent, snap: dict[str, Any], result: RevertResult) -> None:
    name = snap.get("provider")
    if not name or name == agent.provider.name:
        return
    provider = Provider.objects.filter(team_id=agent.team_id, name=name).first()
    if provider is None:
        result.problems.append(f"The provider “{name}” no longer exists; the agent keeps "
                               f"“{agent.provider.name}”.")
    else:
        agent.provider = provider


def _revert_fallbacks(agent: Agent, result: RevertResult) -> None:
    entries = [e for e in agent.fallbacks or [] if isinstance(e, dict)]
    known = set(Provider.objects.filter(team_id=agent.team_id).values_list("name", flat=True))
    kept = [e for e in entries if str(e.get("provider", "")) in known]
    for gone in sorted({str(e.get("provider", "")) for e in entries} - known):
        result.problems.append(f"The fallback provider “{gone}” no longer exists and was left out.")
    agent.fallbacks = kept


def _revert_tools(agent: Agent, snap: dict[str, Any], result: RevertResult) -> list[Tool]:
    names = [str(n) for n in snap.get("tools") or []]
    rows = list(Tool.objects.filter(team_id=agent.team_id, name__in=names))
    found = {t.name for t in rows}
    result.missing_tools = [n for n in names if n not in found]
    if result.missing_tools:
        result.problems.append("These tools no longer exist and were not restored: "
                               + ", ".join(result.missing_tools) + ".")
    return rows


def _revert_tool_policies(agent: Agent, snap: dict[str, Any], tools: list[Tool]) -> None:
    """The version's own tool policies, for the tools that could be restored (the missing ones
    are reported already). A version kept before policies existed had none."""
    found = {t.name for t in tools}
    policies = snap.get("tool_policies") or {}
    agent.tool_policies = ({name: value for name, value in policies.items() if name in found}
                           if isinstance(policies, dict) else {})
