"""LiteLLM's client against agentsite's /v1/chat/completions: ``max_tokens`` and a JSON
``response_format`` as LiteLLM passes them, and the end user as its ``user``. Run by
``tests/e2e/test_litellm_client.py`` with the Python of LiteLLM's own virtualenv (the project's
never gets LiteLLM: ``bench/_litellm.py``); it imports nothing of this project and prints one
line of JSON. Environment: ``AGENTSITE_URL``, ``AGENTSITE_KEY``, ``AGENTSITE_MODEL``."""

from __future__ import annotations

import json
import os

import litellm

server = {"api_base": f"{os.environ['AGENTSITE_URL']}/v1", "api_key": os.environ["AGENTSITE_KEY"]}
model = f"openai/{os.environ['AGENTSITE_MODEL']}"
story = [{"role": "user", "content": "Tell me a story"}]

cut = litellm.completion(model=model, messages=story, max_tokens=5, **server)
whole = litellm.completion(model=model, messages=story, **server)
structured = litellm.completion(model=model, messages=[{"role": "user", "content": "Hello"}],
                                response_format={"type": "json_object"}, user="ada", **server)
try:
    litellm.completion(model=model, messages=story, logprobs=True, **server)
    refused = None
except litellm.BadRequestError as exc:
    refused = str(exc)
print(json.dumps({
    "cut": {"finish": cut.choices[0].finish_reason, "tokens": cut.usage.completion_tokens,
            "text": cut.choices[0].message.content},
    "whole": {"finish": whole.choices[0].finish_reason, "tokens": whole.usage.completion_tokens,
              "text": whole.choices[0].message.content},
    "structured": structured.choices[0].message.content,
    "refused": refused,
}))
