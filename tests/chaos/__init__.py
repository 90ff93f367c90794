"""The chaos suite (issue 13, ``make chaos``): real worker processes, a real embedded Redis, a
fresh SQLite or PostgreSQL database and a fake model server; workers killed and stopped, Redis
restarted, model requests failing; then the database is read for what was lost, duplicated,
stuck or drifted, and how fast dead workers' turns were picked up.

``python -m tests.chaos --help`` for the options; ``run`` plays the scenarios, ``collect`` reads
the outcome, ``measures`` holds the counting and the targets (unit-tested in
``test_measures.py``)."""
