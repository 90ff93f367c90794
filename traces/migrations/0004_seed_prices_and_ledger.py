"""The shipped price table, and the cost ledger and trace flags for the steps recorded before
prices and roll-ups existed (steps priced then keep their cost; those recorded unpriced stay
flagged)."""

from django.db import migrations
from django.db.models import Count, OuterRef, Q, Subquery
from django.db.models.functions import Coalesce


def forwards(apps, schema_editor):
    from traces.costs.price_seed import price_seed_apply
    from traces.costs.rollups import rollups_rebuild

    price_seed_apply(apps.get_model("traces", "ModelPrice"))
    step = apps.get_model("traces", "Step")
    if not step.objects.exists():
        return
    rollups_rebuild(models=(step, apps.get_model("traces", "CostRollup"),
                            apps.get_model("traces", "ConversationCostRollup")))
    unpriced = (step.objects.filter(trace_id=OuterRef("pk"), kind="llm_request",
                                    status__in=["ok", "error"])
                .filter(Q(meta__unpriced=True)).order_by().values("trace_id")
                .annotate(n=Count("id")).values("n"))
    apps.get_model("traces", "Trace").objects.update(unpriced_calls=Coalesce(Subquery(unpriced), 0))


class Migration(migrations.Migration):

    dependencies = [
        ("traces", "0003_prices_rollups_budgets"),
    ]

    operations = [
        migrations.RunPython(forwards, migrations.RunPython.noop),
    ]
