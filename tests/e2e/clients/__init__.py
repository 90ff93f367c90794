"""Client libraries that cannot share the project's virtualenv, each run from a virtualenv of
its own in the cache (``openai_agents``)."""
