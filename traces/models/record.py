"""The record of a turn: a Trace, its Steps (with payloads kept apart from the skeleton), the
trajectory state of each iteration, and the people's ratings of its answer.

Live updates: every persisted change of a trace bumps ``Trace.event_seq``; the row it touched
stores that number in its own ``event_seq``. Each announcement carries it, so a client that
sees a gap (or reconnects) asks for everything after the last number it has."""

from __future__ import annotations

import uuid
from decimal import Decimal

from django.conf import settings
from django.db import models
from django.utils.functional import cached_property

from agentsite.models import Team


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
