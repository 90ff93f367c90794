"""The record of every turn: a Trace, its Steps (with payloads kept apart from the skeleton) and
the trajectory state of each iteration.

Live updates: every persisted change of a trace bumps ``Trace.event_seq``; the row it touched
stores that number in its own ``event_seq``. Each announcement carries it, so a client that
sees a gap (or reconnects) asks for everything after the last number it has."""

from __future__ import annotations

import json
import uuid
from decimal import Decimal

from django.conf import settings
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.utils.functional import cached_property

from agentsite.crypto import decrypt, encrypt
from agentsite.models import Stamped, Team


class TokenBuckets(models.Model):
    """Usage in four non-overlapping buckets, plus reasoning (a part of output)."""

    input_tokens = models.PositiveBigIntegerField(default=0)
    output_tokens = models.PositiveBigIntegerField(default=0)
    cache_write_tokens = models.PositiveBigIntegerField(default=0)
    cache_read_tokens = models.PositiveBigIntegerField(default=0)
    reasoning_tokens = models.PositiveBigIntegerField(default=0)

    class Meta:
        abstract = True

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens + self.cache_write_tokens + self.cache_read_tokens

    @property
    def prompt_tokens(self) -> int:
        return self.input_tokens + self.cache_write_tokens + self.cache_read_tokens

    def set_usage(self, usage: dict | None) -> None:
        usage = usage or {}
        for name in ("input_tokens", "output_tokens", "cache_write_tokens", "cache_read_tokens", "reasoning_tokens"):
            setattr(self, name, int(usage.get(name) or 0))

    def usage_dict(self) -> dict[str, int]:
        return {
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "cache_write_tokens": self.cache_write_tokens,
            "cache_read_tokens": self.cache_read_tokens,
            "reasoning_tokens": self.reasoning_tokens,
        }


class Trace(TokenBuckets):
    """One turn: a user message answered by an agent, from queued to its end."""

    class Status(models.TextChoices):
        QUEUED = "queued", "Queued"
        RUNNING = "running", "Running"
        COMPLETED = "completed", "Completed"
        FAILED = "failed", "Failed"
        CANCELLED = "cancelled", "Cancelled"
        TIMED_OUT = "timed_out", "Timed out"
        INTERRUPTED = "interrupted", "Interrupted"

    ACTIVE = (Status.QUEUED, Status.RUNNING)

    uuid = models.UUIDField(default=uuid.uuid4, unique=True, editable=False)
    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="traces")
    conversation = models.ForeignKey("agents.Conversation", on_delete=models.CASCADE, related_name="traces")
    agent = models.ForeignKey("agents.Agent", on_delete=models.SET_NULL, null=True, related_name="traces")
    agent_version = models.PositiveIntegerField(null=True, blank=True)
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, related_name="traces")
    user_message = models.ForeignKey("agents.Message", on_delete=models.SET_NULL, null=True, blank=True, related_name="+")
    # Started through the API with this key (its traffic is split by key on the costs page).
    api_key = models.ForeignKey("agentsite.ApiKey", on_delete=models.SET_NULL, null=True, blank=True,
                                related_name="traces")
    # The rate-limit windows this turn holds a token reservation in (settled when it ends).
    quota_keys = models.JSONField(default=list, blank=True)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.QUEUED)
    # Why this model: {"rule", "hint", "matched_keyword", "matched_pattern", "reason", "provider", "model",
    # "fallbacks_used": [...], "budget": {...}}
    routing = models.JSONField(default=dict, blank=True)
    provider_name = models.CharField(max_length=100, blank=True)
    provider_kind = models.CharField(max_length=16, blank=True)
    model = models.CharField(max_length=200, blank=True)
    cost_usd = models.DecimalField(max_digits=18, decimal_places=10, default=Decimal(0))
    # Model requests of the turn that had no price (counted at $0) and that were priced by a
    # prefix match: the flags behind the cost figure.
    unpriced_calls = models.PositiveIntegerField(default=0)
    prefix_priced_calls = models.PositiveIntegerField(default=0)
    # Model requests whose tokens are the runtime's estimate (the server reported no usage, or
    # the stream was cut off before it did): the flag behind the token figures.
    estimated_calls = models.PositiveIntegerField(default=0)
    duration_ms = models.PositiveIntegerField(null=True, blank=True)
    iterations = models.PositiveIntegerField(default=0)
    step_count = models.PositiveIntegerField(default=0)
    event_seq = models.PositiveBigIntegerField(default=0)
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    error = models.TextField(blank=True)
    error_kind = models.CharField(max_length=32, blank=True)
    worker = models.CharField(max_length=200, blank=True)
    attempts = models.PositiveSmallIntegerField(default=0)
    cancel_requested_at = models.DateTimeField(null=True, blank=True)
    cancel_reason = models.CharField(max_length=200, blank=True)
    # The final answer as shown, for lists and search (the Message holds the blocks).
    answer = models.TextField(blank=True)
    # When the turn task was last sent to the broker. Empty while the trace waits behind another
    # turn of its conversation (one turn in flight per conversation); the reaper uses it to find
    # traces that were never sent, or whose message was lost.
    enqueued_at = models.DateTimeField(null=True, blank=True)
    # Facts about the run that are not steps, e.g. {"warnings": ["Tool 'x' is not available ..."]}.
    # A fork keeps what it changed in ``meta["fork"]`` (``agents.turns.fork``).
    meta = models.JSONField(default=dict, blank=True)
    # A run started from step ``fork_seq`` of another trace, with its recorded tool results.
    forked_from = models.ForeignKey("self", on_delete=models.SET_NULL, null=True, blank=True,
                                    related_name="forks")
    fork_seq = models.PositiveIntegerField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [
            models.Index(fields=["team", "-created_at"], name="trace_team_created"),
            models.Index(fields=["team", "status", "-created_at"], name="trace_team_status"),
            models.Index(fields=["team", "agent", "-created_at"], name="trace_team_agent"),
            models.Index(fields=["conversation", "created_at"], name="trace_conversation"),
            models.Index(fields=["status", "heartbeat_at"], name="trace_status_heartbeat"),
            # The costs page's most expensive traces.
            models.Index(fields=["team", "-cost_usd"], name="trace_team_cost"),
            # The list's model filter, and its menu: one index step per distinct model.
            models.Index(fields=["team", "model"], name="trace_team_model"),
            # A member's traces (those of the conversations they may see): counted and listed
            # from the index without reading each of the team's traces (16 -> 2 ms at 10,000).
            models.Index(fields=["team", "conversation", "-created_at"], name="trace_team_conversation"),
        ]

    def __str__(self) -> str:
        return f"Trace {self.uuid.hex[:8]} ({self.status})"

    @property
    def is_active(self) -> bool:
        return self.status in self.ACTIVE

    @property
    def group_name(self) -> str:
        return f"trace_{self.uuid.hex}"

    @cached_property
    def fallbacks_used(self) -> list[str]:
        """The fallback provider/model pairs a failover moved to, in order (from retry steps)."""
        if not self.pk or not self.step_count or getattr(self, "has_retries", True) is False:
            return []
        rows = self.steps.filter(kind=Step.Kind.RETRY).order_by("seq").values_list("meta", flat=True)
        return [f"{m.get('next_provider') or '?'} / {m.get('next_model') or '?'}"
                for m in rows if isinstance(m, dict) and m.get("failover")]

    @cached_property
    def price_sources(self) -> list[str]:
        """Where the cost figure comes from, one line per price used (for the header's hover):
        "gpt-4o: OpenAI gpt-4o, global price v1, exact match", and the unpriced models."""
        if not self.pk or not self.step_count:
            return []
        rows = (self.steps.filter(kind=Step.Kind.LLM_REQUEST)
                .exclude(status__in=[Step.Status.RUNNING, Step.Status.WAITING])
                .values_list("model", "price_match", "price__model", "price__version",
                             "price__team_id", "price__label").distinct())
        lines = []
        for model, match, price_model, version, team_id, label in rows:
            if price_model is None:
                lines.append(f"{model or '?'}: no price, counted as $0")
                continue
            scope = "team price" if team_id else "global price"
            extra = f" ({label})" if label else ""
            lines.append(f"{model}: {price_model}{extra}, {scope} v{version}, {match or 'exact'} match")
        return sorted(set(lines))


class Step(TokenBuckets):
    """One thing a turn did: a model request, a tool call, an approval, a compaction, a retry,
    an error. Payloads (request, response, arguments, output) live in ``StepPayload``."""

    class Kind(models.TextChoices):
        LLM_REQUEST = "llm_request", "Model request"
        TOOL_CALL = "tool_call", "Tool call"
        APPROVAL = "approval", "Approval"
        COMPACTION = "compaction", "Compaction"
        RETRY = "retry", "Retry"
        ERROR = "error", "Error"
        RESUME = "resume", "Resumed"
        HOOK = "hook", "Hook"

    class Status(models.TextChoices):
        RUNNING = "running", "Running"
        WAITING = "waiting", "Waiting"
        OK = "ok", "OK"
        ERROR = "error", "Error"

    trace = models.ForeignKey(Trace, on_delete=models.CASCADE, related_name="steps")
    seq = models.PositiveIntegerField()
    kind = models.CharField(max_length=16, choices=Kind.choices)
    name = models.CharField(max_length=200, blank=True)
    iteration = models.PositiveIntegerField(default=0)
    status = models.CharField(max_length=8, choices=Status.choices, default=Status.RUNNING)
    success = models.BooleanField(null=True)
    started_at = models.DateTimeField()
    # Milliseconds from the trace's start, for the timeline without a join.
    offset_ms = models.PositiveIntegerField(default=0)
    duration_ms = models.FloatField(null=True, blank=True)
    error = models.TextField(blank=True)
    provider = models.CharField(max_length=100, blank=True)
    model = models.CharField(max_length=200, blank=True)
    call_id = models.CharField(max_length=200, blank=True)
    cost_usd = models.DecimalField(max_digits=18, decimal_places=10, null=True, blank=True)
    # The price row (one version of a model's price) the cost was computed with, and how the
    # step's model matched it; empty for an unpriced model request (cost 0, meta.unpriced).
    price = models.ForeignKey("ModelPrice", on_delete=models.RESTRICT, null=True, blank=True,
                              related_name="+")
    price_match = models.CharField(max_length=8, blank=True)
    # Small facts for the skeleton: tools available/called, first-token latency, previews, etc.
    meta = models.JSONField(default=dict, blank=True)
    event_seq = models.PositiveBigIntegerField(default=0)

    class Meta:
        ordering = ["trace_id", "seq"]
        constraints = [models.UniqueConstraint(fields=["trace", "seq"], name="step_unique_seq_per_trace")]
        indexes = [
            models.Index(fields=["trace", "event_seq"], name="step_trace_event"),
            models.Index(fields=["started_at"], name="step_started"),
        ]

    SHORT_KIND = {"llm_request": "model", "tool_call": "tool", "approval": "approval", "compaction": "compaction",
                  "retry": "retry", "error": "error", "resume": "resume", "hook": "hook"}

    def __str__(self) -> str:
        return f"#{self.seq} {self.kind} {self.name}"

    @property
    def short_kind(self) -> str:
        return self.SHORT_KIND.get(self.kind, self.kind)


class StepPayload(models.Model):
    """A step's heavy content, loaded on demand. Scrubbed of credentials before it is stored."""

    class Kind(models.TextChoices):
        REQUEST = "request", "Request"
        RESPONSE = "response", "Response"
        ARGUMENTS = "arguments", "Arguments"
        OUTPUT = "output", "Output"
        # The assistant message a model request's answer became (calls with their ids): what a
        # stored turn is continued from.
        MESSAGE = "message", "Message"
        # What a model request had streamed so far, saved now and then while it streams, so that
        # a request cut off by a dead worker keeps its text.
        PARTIAL = "partial", "Streamed so far"

    step = models.ForeignKey(Step, on_delete=models.CASCADE, related_name="payloads")
    kind = models.CharField(max_length=16, choices=Kind.choices)
    content = models.TextField()
    content_type = models.CharField(max_length=32, default="application/json")
    size = models.PositiveIntegerField(default=0)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["step", "kind"], name="steppayload_unique_kind")]

    def __str__(self) -> str:
        return f"{self.kind} of {self.step}"


class TrajectoryState(models.Model):
    """The structured state after one tool iteration: objective, evidence, uncertainties,
    failures, next_plan, tool_calls — and which of them changed since the previous one."""

    trace = models.ForeignKey(Trace, on_delete=models.CASCADE, related_name="trajectory_states")
    iteration = models.PositiveIntegerField()
    fields = models.JSONField(default=dict)
    changed = models.JSONField(default=list, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    event_seq = models.PositiveBigIntegerField(default=0)

    class Meta:
        ordering = ["trace_id", "iteration"]
        constraints = [models.UniqueConstraint(fields=["trace", "iteration"], name="trajectory_unique_iteration")]

    def __str__(self) -> str:
        return f"state after iteration {self.iteration}"


class Feedback(models.Model):
    """A person's thumbs up or down on an answer, with an optional comment: one per person and
    trace, kept with the trace (shown in the inspector, a filter of the trace list)."""

    class Rating(models.IntegerChoices):
        UP = 1, "Good answer"
        DOWN = -1, "Bad answer"

    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="+")
    trace = models.ForeignKey(Trace, on_delete=models.CASCADE, related_name="feedback")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    rating = models.SmallIntegerField(choices=Rating.choices)
    comment = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["trace_id", "created_at"]
        constraints = [models.UniqueConstraint(fields=["trace", "user"], name="feedback_one_per_person")]

    def __str__(self) -> str:
        return f"{self.get_rating_display()} on {self.trace_id}"

    @property
    def is_up(self) -> bool:
        return self.rating == self.Rating.UP


# -- prices, roll-ups and budgets -----------------------------------------------------------------
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
    precision every step cost is kept at): integer sums are exact on every database."""

    calls = models.PositiveBigIntegerField(default=0)
    unpriced_calls = models.PositiveBigIntegerField(default=0)
    estimated_calls = models.PositiveBigIntegerField(default=0)
    cost_units = models.BigIntegerField(default=0)
    input_tokens = models.BigIntegerField(default=0)
    output_tokens = models.BigIntegerField(default=0)
    cache_write_tokens = models.BigIntegerField(default=0)
    cache_read_tokens = models.BigIntegerField(default=0)
    reasoning_tokens = models.BigIntegerField(default=0)

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



# -- export -------------------------------------------------------------------------------------
class TraceExporter(models.Model):
    """A team's OpenTelemetry exporter (``traces.export``): where its turns' spans go, with
    which headers, and how much content they carry (``traces.export.content``)."""

    class Content(models.TextChoices):
        OFF = "off", "Off: no prompts, answers, arguments or results"
        REDACTED = "redacted", "Redacted: scrubbed of credentials and cut to a length"
        FULL = "full", "Full: everything the trace stores"

    team = models.OneToOneField(Team, on_delete=models.CASCADE, related_name="trace_exporter")
    enabled = models.BooleanField(
        default=True, help_text="Send this team's turns. Off: nothing is sent, not even the "
                                "site's default exporter.")
    endpoint = models.CharField(
        max_length=500,
        help_text="The OTLP/HTTP endpoint: a base URL such as https://cloud.langfuse.com/api/public/otel "
                  "or http://phoenix:6006 (“/v1/traces” is added), or the full traces URL.")
    headers_encrypted = models.TextField(blank=True, editable=False)
    header_names = models.JSONField(default=list, blank=True, editable=False)
    content = models.CharField(
        max_length=8, choices=Content.choices, default=Content.OFF,
        help_text="Prompts, answers, tool arguments and results are opt-in.")
    max_field_chars = models.PositiveIntegerField(
        default=1000, validators=[MinValueValidator(16), MaxValueValidator(1_000_000)],
        help_text="Redacted: each text is cut to this many characters.")
    service_name = models.CharField(
        max_length=100, default="agentsite",
        help_text="The service name of the spans; Phoenix files them under a project of this name.")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    updated_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True,
                                   blank=True, related_name="+", editable=False)

    class Meta:
        verbose_name = "trace exporter"

    def __str__(self) -> str:
        return f"Exporter of {self.team}"

    def headers(self) -> dict[str, str]:
        if not self.headers_encrypted:
            return {}
        data = json.loads(decrypt(self.headers_encrypted))
        return {str(k): str(v) for k, v in data} if isinstance(data, list) else {}

    def set_headers(self, pairs: list[tuple[str, str]]) -> None:
        self.header_names = [name for name, _ in pairs]
        self.headers_encrypted = encrypt(json.dumps([[n, v] for n, v in pairs])) if pairs else ""
