"""A trace leaving the server: as JSON for download (``records``), and as OpenTelemetry GenAI
spans to a team's observability stack: which exporter (``config``), the spans' ids, content and
shape (``ids``, ``content``, ``spans``), read from the stored record (``stored``) and sent off
the turn's path (``pipeline``); the exporter page (``admin``) tries an endpoint with ``probe``."""
