"""The costs of the end users behind a team's API keys (``agents.api.end_users``), from the
per-conversation ledger: a conversation keeps the end user it was made for."""

from __future__ import annotations

from dataclasses import replace

from agentsite.models import Team

from ..models import ConversationCostRollup
from .breakdowns import Group
from .rollups import AMOUNT_FIELDS
from .selectors import Amounts, CostFilters, Resolved, ledger_rows, ledger_sums

NO_END_USER = "No end user named"


def end_user_breakdown(*, team: Team, filters: CostFilters, resolved: Resolved,
                       limit: int | None = None, total: Amounts | None = None) -> list[Group]:
    """The costs of each end user of the team's keys, largest first, from the per-conversation
    ledger (a conversation keeps the end user it was made for; with a key filter, the
    conversations made through that key). An end user is the person's whose keys name it:
    ``key`` is (end user, username), labelled "ada (of bob's keys)". What no end user was named
    for is one group, keyed ("", ""), so that the groups add up to the conversations' spend.
    ``total``: the range's amounts with the same filters, when the caller has read them."""
    if resolved.impossible:
        return []
    rows = ledger_rows(ConversationCostRollup, team=team, filters=filters,
                       resolved=replace(resolved, api_key_id=None))
    conversations = team.conversations.all()  # the conversation model, through the team
    if resolved.api_key_id is not None:
        rows = rows.filter(conversation_id__in=conversations.filter(
            api_key_id=resolved.api_key_id or None).values("pk"))
    # The conversations made for an end user, summed each, then named: a lookup of each ledger
    # row's conversation (two subqueries a row) took 13 ms of a month's page.
    named = conversations.exclude(end_user="")
    per_conversation = (rows.filter(conversation_id__in=named.values("pk")).values("conversation_id")
                        .annotate(**ledger_sums()).order_by())
    sums = {row["conversation_id"]: row for row in per_conversation}
    owners = {pk: (end_user, owner or "") for pk, end_user, owner in
              named.filter(pk__in=rows.values("conversation_id"))
              .values_list("pk", "end_user", "created_by__username")} if sums else {}
    summed: dict[tuple[str, str], dict[str, int]] = {}
    for conversation_id, row in sums.items():
        into = summed.setdefault(owners.get(conversation_id, ("", "")), dict.fromkeys(AMOUNT_FIELDS, 0))
        for name in AMOUNT_FIELDS:
            into[name] += int(row[name] or 0)
    # What no end user was named for: the rest of the range's spend (``total``, when the caller
    # has it: both ledgers hold the same spend, but for a key's, which only the main one keeps).
    rest = _rest(summed, total if resolved.api_key_id is None else None)
    if rest is None or any(value < 0 for value in rest.values()):  # the ledgers disagree
        rest = _rest(summed, Amounts.of(rows.aggregate(**ledger_sums())))
    if rest["calls"]:
        into = summed.setdefault(("", ""), dict.fromkeys(AMOUNT_FIELDS, 0))
        for name in AMOUNT_FIELDS:
            into[name] += rest[name]
    groups = [Group(key, f"{key[0]} (of {key[1]}'s keys)" if key[0] else NO_END_USER, Amounts.of(sums))
              for key, sums in summed.items()]
    groups.sort(key=lambda g: (-g.amounts.cost_units, g.key))
    return groups[:limit] if limit is not None else groups


def _rest(summed: dict[tuple[str, str], dict[str, int]], total: Amounts | None) -> dict[str, int] | None:
    """``total`` less the end users' amounts."""
    if total is None:
        return None
    rest = {name: getattr(total, name) for name in AMOUNT_FIELDS}
    for amounts in summed.values():
        for name in AMOUNT_FIELDS:
            rest[name] -= amounts[name]
    return rest
