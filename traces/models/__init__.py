"""The record of every turn and what it cost, a module per room that owns it: the record itself
(``record``: Trace, Step and its payloads, trajectory states, feedback), its costs (``costs``:
prices, roll-ups, budgets) and its export (``export``: a team's OpenTelemetry exporter).
Everything else imports them from here."""

from traces.models.costs import (
    Budget,
    ConversationCostRollup,
    CostAmounts,
    CostRollup,
    ModelPrice,
)
from traces.models.export import TraceExporter
from traces.models.record import (
    Feedback,
    Step,
    StepPayload,
    TokenBuckets,
    Trace,
    TrajectoryState,
)

__all__ = [
    "Budget",
    "ConversationCostRollup",
    "CostAmounts",
    "CostRollup",
    "Feedback",
    "ModelPrice",
    "Step",
    "StepPayload",
    "TokenBuckets",
    "Trace",
    "TraceExporter",
    "TrajectoryState",
]
