# ruff: noqa: I001 - "agents" is openai-agents' package
# openai-agents, with its default settings (the Responses API), running an agent of agentsite.
import asyncio
import os

from openai import AsyncOpenAI
from agents import Agent, Runner, set_default_openai_client, set_tracing_disabled

set_default_openai_client(AsyncOpenAI(
    base_url=os.environ.get("AGENTSITE_URL", "http://127.0.0.1:8000") + "/v1",
    api_key=os.environ["AGENTSITE_API_KEY"],  # ask_…, from the API keys page
))
set_tracing_disabled(True)  # or keep the SDK's own tracing, which sends it to OpenAI
agent = Agent(name="Assistant", instructions="Answer briefly.", model="demo-assistant")


async def main() -> None:
    first = await Runner.run(agent, "What is 6 times 7?")
    print(first.final_output)
    # The next turn continues the response stored on agentsite.
    second = await Runner.run(agent, "Tell me about the weather.",
                              previous_response_id=first.last_response_id)
    print(second.final_output)


asyncio.run(main())
