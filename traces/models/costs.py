"""What model requests cost: the versioned price table, the daily cost roll-ups kept beside the
steps, and the spending limits checked before every request (``traces.costs`` reads and writes
them)."""

from __future__ import annotations

import uuid

from django.conf import settings
from django.db import models

from agentsite.models import Stamped, Team


class ModelPrice(Stamped):
    """One version of a model's price, in USD per million tokens for each usage bucket.

    A row is global (``team`` empty: the shipped table, kept by site admins) or a team's own
    (negotiated prices, local models). Rates are never edited in place: a change is a new row
    with the next ``version`` and its own ``effective_from``, so every recorded cost keeps
    pointing at the price it was computed with. How a model name finds its row is
    ``traces.costs.pricing`` (exact name, then aliases, then a version-suffix prefix)."""

    class Match(models.TextChoices):
        EXACT = "exact", "Exact name"
        ALIAS = "alias", "Alias"
        PREFIX = "prefix", "Prefix"

    uuid = models.UUIDField(default=uuid.uuid4, unique=True, editable=False)
    team = models.ForeignKey(Team, on_delete=models.CASCADE, null=True, blank=True,
                             related_name="model_prices",
                             help_text="Empty: the global table every team uses.")
    provider_kind = models.CharField(
        max_length=16, blank=True,
        help_text="Only for providers of this kind; empty for any kind but the offline demo.")
    vendor = models.CharField(
        max_length=32, blank=True,
        help_text="Who sells the model (openai, anthropic, google). A name qualified with it, "
                  "like “openai/gpt-4o”, matches as an alias.")
    model = models.CharField(max_length=200, help_text="The model name, as the API reports it.")
    aliases = models.JSONField(default=list, blank=True,
                               help_text="Other exact names of the same model and price.")
    prefix = models.BooleanField(
        default=False,
        help_text="Also price every name that starts with this one (flagged as a prefix match). "
                  "Without it, only dated versions like “-2024-08-06”, “-20250514”, “-latest” "
                  "or “@…” after the name match.")
    input_per_mtok = models.DecimalField("input", max_digits=14, decimal_places=6)
    output_per_mtok = models.DecimalField("output", max_digits=14, decimal_places=6)
    cache_write_per_mtok = models.DecimalField("cache write", max_digits=14, decimal_places=6,
                                               null=True, blank=True,
                                               help_text="Empty: the input rate.")
    cache_read_per_mtok = models.DecimalField("cache read", max_digits=14, decimal_places=6,
                                              null=True, blank=True,
                                              help_text="Empty: the input rate.")
    effective_from = models.DateTimeField(help_text="Requests from this moment use this price.")
    version = models.PositiveIntegerField(default=1, editable=False)
    label = models.CharField(max_length=100, blank=True,
                             help_text="Shown beside the cost, e.g. “free (offline demo)”.")
    source_url = models.URLField(blank=True)
    source_note = models.CharField(max_length=200, blank=True,
                                   help_text="Where and when the price was read.")
    # What the model can hold, from the catalogue (or set by hand): a fact about the model, not
    # a price, so it is kept on the current row and changed in place, not versioned.
    context_window = models.PositiveIntegerField(
        null=True, blank=True, help_text="Tokens the model reads at most (its context window).")
    max_output_tokens = models.PositiveIntegerField(
        null=True, blank=True, help_text="Tokens the model writes at most in one answer.")
    # Provenance of rows imported from the community model catalogue (``traces.costs.catalogue``).
    catalogue_source = models.CharField(
        max_length=300, blank=True, help_text="The catalogue this row was imported from (URL or file).")
    catalogue_version = models.CharField(max_length=50, blank=True,
                                         help_text="The catalogue's version, when known.")
    catalogue_read_at = models.DateTimeField(null=True, blank=True,
                                             help_text="When the catalogue was read.")
    created_at = models.DateTimeField(auto_now_add=True)
    # Changed on every write, edits in place included: each process keeps the table it read
    # until this (or the rows' count) says otherwise (``traces.costs.pricing.price_table_for``).
    updated_at = models.DateTimeField(auto_now=True)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True,
                                   blank=True, related_name="+", editable=False)

    # Fields whose change makes a new version rather than an edit.
    VERSIONED_FIELDS = ("provider_kind", "vendor", "model", "aliases", "prefix", "input_per_mtok",
                        "output_per_mtok", "cache_write_per_mtok", "cache_read_per_mtok",
                        "effective_from")

    class Meta:
        ordering = ["vendor", "model", "-effective_from", "-version"]
        constraints = [
            models.UniqueConstraint(fields=["provider_kind", "model", "version"],
                                    condition=models.Q(team__isnull=True),
                                    name="modelprice_global_version"),
            models.UniqueConstraint(fields=["team", "provider_kind", "model", "version"],
                                    condition=models.Q(team__isnull=False),
                                    name="modelprice_team_version"),
        ]
        indexes = [models.Index(fields=["team", "model"], name="modelprice_team_model")]

    def __str__(self) -> str:
        scope = "global" if self.team_id is None else "team"
        return f"{self.model} v{self.version} ({scope})"

    @property
    def is_free(self) -> bool:
        return not (self.input_per_mtok or self.output_per_mtok or self.cache_write_per_mtok
                    or self.cache_read_per_mtok)


class CostAmounts(models.Model):
    """What model requests used and cost. ``cost_units`` is the cost in units of 1e-10 USD (the
    precision every step cost is kept at): integer sums are exact on every database;
    ``cache_lost_units``, in the same units, what prompt-cache misses cost (``traces.costs.cache``:
    tokens that could have been read from the cache, billed as input instead)."""

    calls = models.PositiveBigIntegerField(default=0)
    unpriced_calls = models.PositiveBigIntegerField(default=0)
    estimated_calls = models.PositiveBigIntegerField(default=0)
    cost_units = models.BigIntegerField(default=0)
    input_tokens = models.BigIntegerField(default=0)
    output_tokens = models.BigIntegerField(default=0)
    cache_write_tokens = models.BigIntegerField(default=0)
    cache_read_tokens = models.BigIntegerField(default=0)
    reasoning_tokens = models.BigIntegerField(default=0)
    cache_lost_units = models.BigIntegerField(default=0)

    class Meta:
        abstract = True


class CostRollup(CostAmounts):
    """A day of a team's model requests per agent, user, provider and model: the ledger the
    costs page and the budgets read. Kept exact by ``traces.costs.rollups`` in the same transaction
    as every step cost written or corrected. Ids are plain numbers (0 = none): a deleted agent,
    user or conversation does not take its spend out of the ledger."""

    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="+")
    day = models.DateField()
    agent_id = models.BigIntegerField(default=0)
    user_id = models.BigIntegerField(default=0)
    # The API key the requests came through (0: the browser).
    api_key_id = models.BigIntegerField(default=0)
    provider = models.CharField(max_length=100, blank=True)
    model = models.CharField(max_length=200, blank=True)

    class Meta:
        constraints = [models.UniqueConstraint(
            fields=["team", "day", "agent_id", "user_id", "api_key_id", "provider", "model"],
            name="costrollup_unique_dims")]
        indexes = [models.Index(fields=["team", "user_id", "day"], name="costrollup_team_user_day")]

    def __str__(self) -> str:
        return f"{self.day} {self.provider} {self.model}"


class ConversationCostRollup(CostAmounts):
    """A day of one conversation's model requests, per provider and model (the costs page's
    per-conversation view; kept apart so the main ledger stays small)."""

    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="+")
    day = models.DateField()
    conversation_id = models.BigIntegerField(default=0)
    agent_id = models.BigIntegerField(default=0)
    user_id = models.BigIntegerField(default=0)
    provider = models.CharField(max_length=100, blank=True)
    model = models.CharField(max_length=200, blank=True)

    class Meta:
        constraints = [models.UniqueConstraint(
            fields=["team", "day", "conversation_id", "agent_id", "user_id", "provider", "model"],
            name="convcostrollup_unique_key")]
        # The costs page's most expensive conversations of a range: their costs summed in
        # conversation order from the index alone (no table row read, no sort of the range).
        indexes = [models.Index(fields=["team", "conversation_id", "day", "cost_units"],
                                name="convcostrollup_team_conv_cost")]

    def __str__(self) -> str:
        return f"{self.day} conversation {self.conversation_id}"


class Budget(Stamped):
    """A spending limit for a team or one of its people, per day or per month, checked before
    every model request of their turns (``traces.costs.budgets``). From ``warn_at_percent`` a banner
    shows; past the limit, ``block`` refuses the request and ``route_down`` sends the rest of
    the turn to a cheaper route; ``warn`` only warns."""

    class Period(models.TextChoices):
        DAY = "day", "Day"
        MONTH = "month", "Month"

    class Mode(models.TextChoices):
        WARN = "warn", "Warn only"
        BLOCK = "block", "Block turns"
        ROUTE_DOWN = "route_down", "Route down to a cheaper model"

    uuid = models.UUIDField(default=uuid.uuid4, unique=True, editable=False)
    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="budgets")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, null=True,
                             blank=True, related_name="+",
                             help_text="Empty: the whole team's spend.")
    api_key = models.ForeignKey("agentsite.ApiKey", on_delete=models.CASCADE, null=True, blank=True,
                                related_name="budgets",
                                help_text="A limit on what is spent through this API key only.")
    period = models.CharField(max_length=8, choices=Period.choices, default=Period.DAY)
    limit_usd = models.DecimalField("limit (USD)", max_digits=12, decimal_places=4)
    mode = models.CharField(max_length=16, choices=Mode.choices, default=Mode.WARN)
    warn_at_percent = models.PositiveSmallIntegerField(default=80)
    route_down_hint = models.CharField(
        max_length=100, blank=True,
        help_text="Route down to the team's model route with this hint…")
    route_down_provider = models.ForeignKey("agents.Provider", on_delete=models.SET_NULL,
                                            null=True, blank=True, related_name="+",
                                            help_text="…or to this provider and model.")
    route_down_model = models.CharField(max_length=200, blank=True)
    enabled = models.BooleanField(default=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["team_id", "user_id", "period"]
        constraints = [
            models.UniqueConstraint(fields=["team", "period"],
                                    condition=models.Q(user__isnull=True, api_key__isnull=True),
                                    name="budget_unique_team_period"),
            models.UniqueConstraint(fields=["team", "api_key", "period"],
                                    condition=models.Q(api_key__isnull=False),
                                    name="budget_unique_key_period"),
            models.CheckConstraint(condition=models.Q(user__isnull=True) | models.Q(api_key__isnull=True),
                                   name="budget_one_scope"),
            models.UniqueConstraint(fields=["team", "user", "period"],
                                    condition=models.Q(user__isnull=False),
                                    name="budget_unique_user_period"),
        ]

    def __str__(self) -> str:
        return f"{self.scope_label} {self.period_adjective} budget ${self.limit_usd}"

    @property
    def scope_label(self) -> str:
        if self.api_key_id:
            return f"API key {self.api_key}"
        return f"{self.user}'s" if self.user_id else "Team"

    @property
    def period_adjective(self) -> str:
        return "daily" if self.period == self.Period.DAY else "monthly"
