"""``/api/v1/traces/{id}/events``: a turn's live payloads as server-sent events, without their
HTML, ending with ``end`` (status, answer, usage); a finished turn ends at once."""

from __future__ import annotations

import asyncio
import json

import pytest
from asgiref.sync import sync_to_async
from channels.layers import get_channel_layer

from agents.api import turn_stream
from tests.agents.api.rest_keys import async_key_client, key_client
from traces.models import Trace
from traces.record import live

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("close_thread_connections")]


def parse(frames: bytes) -> list[tuple[str, dict]]:
    """(event name, data) of each SSE frame; comment lines are left out."""
    found = []
    for block in frames.decode().split("\n\n"):
        lines = [line for line in block.split("\n") if line and not line.startswith(":")]
        if lines:
            fields = dict(line.split(": ", 1) for line in lines)
            found.append((fields["event"], json.loads(fields["data"])))
    return found


async def read_all(response) -> bytes:
    return b"".join([chunk async for chunk in response.streaming_content])


async def test_a_finished_turn_answers_its_end_at_once(sample_trace, alice, team_a):
    client = await sync_to_async(async_key_client)(alice, team_a, ["traces:read"])

    response = await client.get(f"/api/v1/traces/{sample_trace.uuid}/events")

    assert response.status_code == 200, response.content
    assert response["Content-Type"] == "text/event-stream" and response["Cache-Control"] == "no-cache"
    [(name, data)] = parse(await asyncio.wait_for(read_all(response), 10))
    assert name == "end"
    assert data == {**data, "trace": str(sample_trace.uuid), "status": "completed", "answer": "Generated answer",
                    "cost_usd": "0.12", "error": ""}
    assert data["usage"]["input_tokens"] == sample_trace.input_tokens


async def test_live_payloads_arrive_without_their_html_then_the_end(sample_trace, alice, team_a, monkeypatch):
    monkeypatch.setattr(turn_stream, "KEEPALIVE_S", 0.05)
    await Trace.objects.filter(pk=sample_trace.pk).aupdate(status="running", answer="")
    client = await sync_to_async(async_key_client)(alice, team_a, ["chat"])
    response = await client.get(f"/api/v1/traces/{sample_trace.uuid.hex}/events")
    frames = response.streaming_content.__aiter__()
    first = await asyncio.wait_for(anext(frames), 5)  # a comment while nothing happens: it is listening
    layer, group = get_channel_layer(), live.trace_group(sample_trace.uuid)
    assert first.startswith(b":") and layer.groups.get(group)

    await live.publish([group], live.delta_payload(trace_uuid=sample_trace.uuid, seq=7, step=3, index=0, text="Hel"))
    await live.publish([group], {"event": "step", "trace": sample_trace.uuid.hex, "seq": 8, "step": 3,
                                 "status": "ok", "html": "<tr>…</tr>"})
    await Trace.objects.filter(pk=sample_trace.pk).aupdate(status="completed", answer="Hello")
    await live.publish([group], {"event": "trace", "trace": sample_trace.uuid.hex, "seq": 9, "status": "completed",
                                 "totals": {"cost_usd": "0.12"}, "html": "<header>…</header>"})
    rest = b""
    async for chunk in frames:
        rest += chunk

    found = parse(rest)
    assert [name for name, _ in found] == ["delta", "step", "trace", "end"]
    assert found[0][1]["text"] == "Hel" and found[0][1]["step"] == 3
    assert all("html" not in data for _, data in found)
    assert found[-1][1]["status"] == "completed" and found[-1][1]["answer"] == "Hello"
    assert not layer.groups.get(group)  # it left the trace's group


def test_following_needs_the_chat_or_traces_scope_and_a_visible_trace(sample_trace, alice, team_a, charlie, team_b):
    costs_only = key_client(alice, team_a, ["costs:read"]).get(f"/api/v1/traces/{sample_trace.uuid}/events")
    stranger = key_client(charlie, team_b, ["chat", "traces:read"]).get(f"/api/v1/traces/{sample_trace.uuid}/events")

    assert costs_only.status_code == 403
    assert stranger.status_code == 404
