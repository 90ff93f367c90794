"""agentsite from code: the REST API (``/api/v1/``, schema at ``/api/v1/openapi.json``, docs at
``/api/v1/docs``) and the OpenAI-compatible endpoint (``/v1/chat/completions``, ``/v1/models``),
one django-ninja API authenticated by team API keys (``agentsite.api_keys``)."""
