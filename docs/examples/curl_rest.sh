# The REST API with curl: the team's agents (any scope), one page of them.
URL="${AGENTSITE_URL:-http://127.0.0.1:8000}"

curl --fail-with-body -sS "$URL/api/v1/agents?limit=10" \
  -H "Authorization: Bearer $AGENTSITE_API_KEY"
