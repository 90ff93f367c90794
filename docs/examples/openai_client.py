# The official openai client: one answer, then one streamed.
import os

from openai import OpenAI

client = OpenAI(
    base_url=os.environ.get("AGENTSITE_URL", "http://127.0.0.1:8000") + "/v1",
    api_key=os.environ["AGENTSITE_API_KEY"],  # ask_…, from the API keys page
)

reply = client.chat.completions.create(
    model="demo-assistant",  # an agent's slug
    messages=[{"role": "user", "content": "What is 6 times 7?"}],
)
print(reply.choices[0].message.content)
print(reply.usage.total_tokens, "tokens, trace:", reply.model_extra["agentsite"]["trace_url"])

stream = client.chat.completions.create(
    model="demo-assistant",
    messages=[{"role": "user", "content": "Tell me about the weather in three sentences."}],
    stream=True,
    stream_options={"include_usage": True},  # a last chunk with the usage
)
for chunk in stream:
    if chunk.choices:
        print(chunk.choices[0].delta.content or "", end="", flush=True)
    elif chunk.usage:
        print("\n" + str(chunk.usage.total_tokens), "tokens")
