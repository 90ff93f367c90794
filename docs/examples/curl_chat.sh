# curl: one answer, then the same kind of request streamed as server-sent events
# (data: {chunk} lines, ending with data: [DONE]).
URL="${AGENTSITE_URL:-http://127.0.0.1:8000}"

curl --fail-with-body -sS "$URL/v1/chat/completions" \
  -H "Authorization: Bearer $AGENTSITE_API_KEY" \
  -H "Content-Type: application/json" \
  -d '{"model": "demo-assistant",
       "messages": [{"role": "user", "content": "What is 6 times 7?"}]}'
echo

curl --fail-with-body -sS -N "$URL/v1/chat/completions" \
  -H "Authorization: Bearer $AGENTSITE_API_KEY" \
  -H "Content-Type: application/json" \
  -d '{"model": "demo-assistant", "stream": true,
       "messages": [{"role": "user", "content": "Tell me about the weather in three sentences."}]}'
