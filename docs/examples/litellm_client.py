# LiteLLM (pip install litellm): "openai/" before the agent's slug says the server speaks
# OpenAI's protocol. One answer, then one streamed.
import os

import litellm

server = {
    "api_base": os.environ.get("AGENTSITE_URL", "http://127.0.0.1:8000") + "/v1",
    "api_key": os.environ["AGENTSITE_API_KEY"],
}

reply = litellm.completion(
    model="openai/demo-assistant",
    messages=[{"role": "user", "content": "What is 6 times 7?"}],
    **server,
)
print(reply.choices[0].message.content)
print(reply.usage.total_tokens, "tokens")

stream = litellm.completion(
    model="openai/demo-assistant",
    messages=[{"role": "user", "content": "Tell me about the weather in three sentences."}],
    stream=True,
    **server,
)
for chunk in stream:
    print(chunk.choices[0].delta.content or "", end="", flush=True)
print()
