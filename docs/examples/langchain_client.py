# LangChain's OpenAI chat model (pip install langchain-openai): one answer, then one streamed.
import os

from langchain_openai import ChatOpenAI

chat = ChatOpenAI(
    base_url=os.environ.get("AGENTSITE_URL", "http://127.0.0.1:8000") + "/v1",
    api_key=os.environ["AGENTSITE_API_KEY"],
    model="demo-assistant",  # an agent's slug
)

reply = chat.invoke("What is 6 times 7?")
print(reply.content)
print(reply.usage_metadata["total_tokens"], "tokens")

for chunk in chat.stream("Tell me about the weather in three sentences."):
    print(chunk.content, end="", flush=True)
print()
