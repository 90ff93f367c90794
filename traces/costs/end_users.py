"""The costs of the end users behind a team's API keys (``agents.api.end_users``), from the
per-conversation ledger: a conversation keeps the end user it was made for."""

from __future__ import annotations

from dataclasses import replace

from django.db.models import OuterRef, Subquery, Value
from django.db.models.functions import Coalesce

from agentsite.models import Team

from ..models import ConversationCostRollup
from .rollups import AMOUNT_FIELDS
from .selectors import Amounts, CostFilters, Group, Resolved, ledger_rows, ledger_sums

NO_END_USER = "No end user named"


def end_user_breakdown(*, team: Team, filters: CostFilters, resolved: Resolved,
                       limit: int | None = None) -> list[Group]:
    """The costs of each end user of the team's keys, largest first, from the per-conversation
    ledger (a conversation keeps the end user it was made for; with a key filter, the
    conversations made through that key). An end user is the person's whose keys name it:
    ``key`` is (end user, username), labelled "ada (of bob's keys)". What no end user was named
    for is one group, keyed ("", ""), so that the groups add up to the conversations' spend."""
    if resolved.impossible:
        return []
    rows = ledger_rows(ConversationCostRollup, team=team, filters=filters,
                       resolved=replace(resolved, api_key_id=None))
    conversations = team.conversations.all()  # the conversation model, through the team
    if resolved.api_key_id is not None:
        rows = rows.filter(conversation_id__in=conversations.filter(
            api_key_id=resolved.api_key_id or None).values("pk"))
    of = conversations.filter(pk=OuterRef("conversation_id"))
    grouped = (rows.annotate(end_user=Coalesce(Subquery(of.values("end_user")[:1]), Value("")),
                             owner=Subquery(of.values("created_by__username")[:1]))
               .values("end_user", "owner").annotate(**ledger_sums()).order_by())
    summed: dict[tuple[str, str], dict[str, int]] = {}
    for row in grouped:
        key = (row["end_user"], row["owner"] or "") if row["end_user"] else ("", "")
        into = summed.setdefault(key, dict.fromkeys(AMOUNT_FIELDS, 0))
        for name in AMOUNT_FIELDS:
            into[name] += int(row[name] or 0)
    groups = [Group(key, f"{key[0]} (of {key[1]}'s keys)" if key[0] else NO_END_USER, Amounts.of(sums))
              for key, sums in summed.items()]
    groups.sort(key=lambda g: (-g.amounts.cost_units, g.key))
    return groups[:limit] if limit is not None else groups
