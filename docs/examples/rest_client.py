# The REST API with httpx: start a conversation with an agent, send it a message and wait for
# the answer (scope chat). The conversation keeps its history: send more to the same id.
import os

import httpx

api = httpx.Client(
    base_url=os.environ.get("AGENTSITE_URL", "http://127.0.0.1:8000") + "/api/v1",
    headers={"Authorization": f"Bearer {os.environ['AGENTSITE_API_KEY']}"},
    timeout=120,
)

conversation = api.post("/conversations", json={"agent": "demo-assistant", "title": "From code"})
conversation.raise_for_status()
conversation_id = conversation.json()["id"]

sent = api.post(f"/conversations/{conversation_id}/messages",
                json={"text": "What is 6 times 7?", "wait": True})
sent.raise_for_status()  # 200 with the answer; 202 if the turn outlasted the wait
print(sent.json()["answer"])
print("trace:", sent.json()["trace_url"])
