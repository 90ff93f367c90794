# The official openai client on the Responses API: one response, one streamed that continues it.
import os

from openai import OpenAI

client = OpenAI(
    base_url=os.environ.get("AGENTSITE_URL", "http://127.0.0.1:8000") + "/v1",
    api_key=os.environ["AGENTSITE_API_KEY"],  # ask_…, from the API keys page
)

response = client.responses.create(model="demo-assistant", input="What is 6 times 7?")
print(response.output_text)
for item in response.output:
    if item.type == "mcp_call":  # a tool the agent ran on the server
        print("the agent called", item.name, "->", item.output)

stream = client.responses.create(
    model="demo-assistant",
    input="Tell me about the weather in three sentences.",
    previous_response_id=response.id,  # the same conversation, continued
    stream=True,
)
for event in stream:
    if event.type == "response.output_text.delta":
        print(event.delta, end="", flush=True)
    elif event.type == "response.completed":
        print("\n" + str(event.response.usage.total_tokens), "tokens")
