"""A trace leaving the server: as JSON for download (``records``), and as OpenTelemetry GenAI
spans to a team's observability stack (``ids``, ``spans``, ``pipeline``, ``settings``)."""
