"""The Celery app: Redis broker, JSON only, late acks, and two queues.

* ``turns``       agent turns (long, mostly waiting on model APIs);
* ``maintenance`` housekeeping (health probes, the reaper, roll-ups).

Workers use the thread pool: a turn spends seconds waiting on a model, so one process carries
many turns at once (``CELERY_WORKER_CONCURRENCY``).
"""

from __future__ import annotations

import os

from celery import Celery
from kombu import Exchange, Queue

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "agentsite.settings")

app = Celery("agentsite")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.conf.task_queues = tuple(Queue(name, Exchange(name, type="direct"), routing_key=name) for name in ("turns", "maintenance"))
app.conf.task_default_queue = "turns"
app.conf.task_default_exchange = "turns"
app.conf.task_default_routing_key = "turns"
app.conf.task_routes = {
    "agentsite.tasks.*": {"queue": "maintenance", "routing_key": "maintenance"},
    "agents.turns.tasks.reap": {"queue": "maintenance", "routing_key": "maintenance"},
    "traces.tasks.*": {"queue": "maintenance", "routing_key": "maintenance"},
}
# Named, not imported: the task modules load once Django is set up.
app.autodiscover_tasks(["agentsite", "agents.turns"])
