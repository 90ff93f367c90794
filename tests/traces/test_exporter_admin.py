"""The exporter page (admin → Trace exporters) and the backfill command: write-only headers,
the outbound policy on the URL, "Send a test span" reporting the receiver's answer, another
team's exporter out of reach; a date range of ended turns sent again with the same span ids."""

from __future__ import annotations

import http.server
import io
import threading

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.urls import reverse
from django.utils import timezone

from agents.turns.services import turn_start
from agents.turns.tasks import turn_run
from agentsite.models import AuditEvent
from tests.members import member_of
from traces.export import config as export_config
from traces.export import probe
from traces.export.ids import span_id_for, tool_step_key
from traces.models import TraceExporter

pytestmark = pytest.mark.django_db


def add(client, team, **fields):
    return client.post(reverse("admin:traces_traceexporter_add"), {
        "team": team.pk, "enabled": "on", "content": "off", "max_field_chars": 1000,
        "service_name": "agentsite", **fields})


def test_an_admin_adds_an_exporter_whose_headers_are_never_shown_and_tests_it(
        settings, client_for, alice, team_a, receiver):
    settings.OUTBOUND_ALLOWED_NETWORKS = ["127.0.0.1/32"]
    client = client_for(alice)
    response = add(client, team_a, endpoint=receiver.endpoint.removesuffix("/v1/traces"),
                   headers="Authorization: Basic cGs6c2s=\nx-project: one")
    assert response.status_code == 302, response.content.decode()[:2000]
    exporter = TraceExporter.objects.get(team=team_a)
    assert exporter.headers() == {"Authorization": "Basic cGs6c2s=", "x-project": "one"}
    assert "cGs6c2s" not in exporter.headers_encrypted
    audit = AuditEvent.objects.get(object_type="traces.TraceExporter", action="create")
    assert "cGs6c2s" not in str(audit.after) and audit.after["headers_encrypted"] == "set"

    change = reverse("admin:traces_traceexporter_change", args=[exporter.pk])
    page = client.get(change).content.decode()
    assert "cGs6c2s" not in page and "Stored: Authorization, x-project" in page
    assert reverse("admin:traces_traceexporter_test", args=[exporter.pk]) in page

    answered = client.post(reverse("admin:traces_traceexporter_test", args=[exporter.pk]), follow=True)
    message = [str(m) for m in answered.context["messages"]][0]
    assert "the receiver answered 200 OK" in message and receiver.endpoint in message
    [span] = receiver.wait_for(1)
    assert span.name == "agentsite test span" and span.headers["authorization"] == "Basic cGs6c2s="


def test_a_failing_receiver_is_reported_in_words(settings, client_for, alice, team_a, receiver):
    settings.OUTBOUND_ALLOWED_NETWORKS = ["127.0.0.1/32"]
    exporter = TraceExporter.objects.create(team=team_a, endpoint=receiver.endpoint)
    receiver.fail_with(401)
    answered = client_for(alice).post(reverse("admin:traces_traceexporter_test", args=[exporter.pk]),
                                      follow=True)
    message = [str(m) for m in answered.context["messages"]][0]
    assert message.startswith("The test span to") and "401" in message


def test_an_internal_endpoint_is_refused_on_save(client_for, alice, team_a):
    response = add(client_for(alice), team_a, endpoint="http://169.254.169.254/v1/traces")
    assert response.status_code == 200
    assert "cloud metadata address" in response.content.decode()
    assert not TraceExporter.objects.exists()


def test_another_teams_exporter_is_out_of_reach(client_for, charlie, vera, team_a):
    exporter = TraceExporter.objects.create(team=team_a, endpoint="https://collector.example.com")
    for person, status in ((charlie, 404), (vera, 302)):  # a viewer is sent to the admin's sign-in
        client = client_for(person)
        change = reverse("admin:traces_traceexporter_change", args=[exporter.pk])
        assert client.get(change).status_code == status
        assert client.post(reverse("admin:traces_traceexporter_test", args=[exporter.pk])).status_code == status
    listing = client_for(charlie).get(reverse("admin:traces_traceexporter_changelist")).content.decode()
    assert "collector.example.com" not in listing


@pytest.mark.django_db(transaction=True)
def test_the_backfill_sends_ended_turns_with_their_live_ids(
        settings, receiver, conversation, alice, sent_turns, use_redis, team_a):
    settings.OUTBOUND_ALLOWED_NETWORKS = ["127.0.0.1/32"]
    trace = turn_start(conversation=conversation, membership=member_of(alice, conversation), text="What is 6 * 7?")
    assert turn_run(trace.pk) == "completed"  # no exporter yet: nothing leaves
    assert receiver.requests == 0
    today = timezone.localdate().isoformat()

    out = io.StringIO()
    call_command("otel_backfill", since=today, stdout=out)
    assert "1 turn(s) skipped, no exporter is on" in out.getvalue()

    TraceExporter.objects.create(team=team_a, endpoint=receiver.endpoint)
    export_config.forget()
    out = io.StringIO()
    call_command("otel_backfill", since=today, dry_run=True, stdout=out)
    assert "would send" in out.getvalue() and receiver.requests == 0

    out = io.StringIO()
    call_command("otel_backfill", since=today, until=today, team=team_a.name, stdout=out)
    assert "1 turn(s), 4 span(s)" in out.getvalue()
    spans = receiver.wait_for(4)
    assert sorted(s.name for s in spans) == ["chat demo", "chat demo", "execute_tool calculator",
                                             "invoke_agent Helper"]
    assert {s.trace_id for s in spans} == {trace.uuid.hex}
    # the same spans as the live export would have sent: the tool's span is the one its call
    # named in its traceparent
    tool = next(s for s in spans if s.name == "execute_tool calculator")
    step = trace.steps.get(kind="tool_call")
    assert tool.span_id == f"{span_id_for(trace.uuid, tool_step_key(step.iteration, step.call_id)):016x}"

    # Where this command's outbound policy refuses the team's endpoint (no allowlist for it, as
    # a plain `manage.py` run may lack the worker's), it says so and why, tries nothing, fails.
    settings.OUTBOUND_ALLOWED_NETWORKS = []
    export_config.forget()
    requests, out, err = receiver.requests, io.StringIO(), io.StringIO()
    with pytest.raises(CommandError, match="not sent"):
        call_command("otel_backfill", since=today, stdout=out, stderr=err)
    said = err.getvalue()
    assert "1 turn(s) not sent: the outbound-network policy refuses its exporter's endpoint" in said
    assert receiver.endpoint in said and "OUTBOUND_ALLOWED_NETWORKS" in said
    assert receiver.requests == requests


# -- what a test shows of the receiver's answer (issue 30, F1) ---------------------------------------
SECRET_BODY = ("upstream says: AccountKey=Zm9vYmFyYmF6cXV4Zm9vYmFyYmF6cXV4Zm9vYmFyYmF6cXV4+/YWJjZA==;"
               " token sk-proj-4fQ9xW2mZ7rT1vB8nK3pL6sD0hJ5gY2cX9eA7uI4oP1qR8tE3wS6zV0bN5mM2kL9jH4g\n"
               + "padding " * 200)


@pytest.fixture
def talking_receiver():
    """A plain HTTP server on loopback that answers every POST 401 with a text body of secrets."""
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802 - http.server's name
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            body = SECRET_BODY.encode()
            self.send_response(401)
            self.send_header("Content-Type", "text/plain; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1/traces"
    server.shutdown()
    server.server_close()


def test_a_teams_internal_endpoint_shows_nothing_of_its_answer(settings, talking_receiver):
    settings.OUTBOUND_ALLOWED_NETWORKS = ["127.0.0.1/32"]
    settings.DEBUG = True  # plain http to the allowlisted address
    result = probe.send_test_span(export_config.ExportConfig(endpoint=talking_receiver))
    assert result.status == 401 and not result.ok
    assert "upstream says" not in result.answer and "Zm9v" not in result.answer
    assert "not shown: the endpoint is on an internal network" in result.answer


def test_the_operators_endpoint_shows_its_answer_short_and_scrubbed(talking_receiver):
    result = probe.send_test_span(export_config.ExportConfig(endpoint=talking_receiver,
                                                                guarded=False))
    assert result.answer.startswith("401 Unauthorized: upstream says: AccountKey=[REDACTED]")
    assert "Zm9v" not in result.answer and "sk-proj" not in result.answer
    assert "\n" not in result.answer and len(result.answer) < 300
