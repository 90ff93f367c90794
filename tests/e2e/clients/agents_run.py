"""Runs an openai-agents ``Agent`` against agentsite's Responses API with the SDK's default
settings (its tracing export to OpenAI's servers switched off: there is no network), and prints
what each run gave as one line of JSON. Run by ``tests/e2e/test_responses.py`` with the Python
of openai-agents' own virtualenv (``tests/e2e/clients/openai_agents.py``); it imports nothing
of this project. Environment: ``AGENTSITE_URL``, ``AGENTSITE_KEY``, ``AGENTSITE_MODEL``,
``AGENTSITE_INPUT``."""

# ruff: noqa: I001 - "agents" here is openai-agents, not this project's app
from __future__ import annotations

import asyncio
import json
import os

import openai
from agents import Agent, Runner, set_default_openai_client, set_tracing_disabled
from openai.types.responses import ResponseTextDeltaEvent
from openai.types.responses.response_output_item import McpCall


def calls(result) -> list[str]:
    return [item.name for r in result.raw_responses for item in r.output if isinstance(item, McpCall)]


async def main() -> dict:
    set_tracing_disabled(True)
    set_default_openai_client(openai.AsyncOpenAI(
        base_url=f"{os.environ['AGENTSITE_URL']}/v1", api_key=os.environ["AGENTSITE_KEY"],
        max_retries=0), use_for_tracing=False)
    agent = Agent(name="Helper", instructions="Answer briefly.", model=os.environ["AGENTSITE_MODEL"])
    question = os.environ["AGENTSITE_INPUT"]

    first = await Runner.run(agent, question)
    # A second turn with the whole history sent back (the SDK's default) ...
    second = await Runner.run(
        agent, [*first.to_input_list(), {"role": "user", "content": "Tell me about the weather."}])
    # ... and one that continues the stored response instead.
    third = await Runner.run(agent, question, previous_response_id=second.last_response_id)
    streamed = Runner.run_streamed(agent, question)
    deltas = [e.data.delta async for e in streamed.stream_events()
              if e.type == "raw_response_event" and isinstance(e.data, ResponseTextDeltaEvent)]
    return {
        "runs": [{"output": r.final_output, "calls": calls(r), "response_id": r.last_response_id}
                 for r in (first, second, third)],
        "streamed": {"output": streamed.final_output, "deltas": "".join(deltas),
                     "calls": calls(streamed)},
    }


if __name__ == "__main__":
    print(json.dumps(asyncio.run(main())))
