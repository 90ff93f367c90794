"""The record of every turn and what it cost, a module per room that owns it: the record itself
(``record``: Trace, Step and its payloads, trajectory states, feedback), its costs (``costs``:
prices, roll-ups, budgets) and its export (``export``: a team's OpenTelemetry exporter, the turns it still owes and how
delivery goes).
Everything else imports them from here."""

from traces.models.costs import (
    Budget,
    ConversationCostRollup,
    CostAmounts,
    CostRollup,
    ModelPrice,
)
from traces.models.export import ExportState, PendingExport, TraceExporter
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
    "ExportState",
    "Feedback",
    "ModelPrice",
    "PendingExport",
    "Step",
    "StepPayload",
    "TokenBuckets",
    "Trace",
    "TraceExporter",
    "TrajectoryState",
]
