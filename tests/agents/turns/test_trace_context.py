"""The W3C trace context of a turn: ``turn_send`` keeps a valid ``traceparent`` (and its
``tracestate``) in the new trace's ``meta`` and ignores an invalid one; the runtime's
``traceparent_for`` names each tool call's span, in the caller's trace when there is one, and
the caller's ``tracestate`` goes on with it."""

from __future__ import annotations

import pytest

from agents.turns.builder import turn_setup_build
from agents.turns.services import trace_context_meta, turn_send
from agents.turns.trace_context import turn_traceparent_for
from tests.members import acting_of
from traces.export import config as export_config
from traces.export.ids import parse_traceparent, tool_traceparent
from traces.models import Trace, TraceExporter

pytestmark = pytest.mark.django_db

CALLER_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
TRACEPARENT = f"00-{CALLER_TRACE}-00f067aa0ba902b7-01"


def sent(conversation, user, **context) -> Trace:
    trace = turn_send(acting=acting_of(user, conversation), text="hello", **context).trace
    return Trace.objects.select_related("user_message").get(pk=trace.pk)


def test_a_valid_traceparent_and_its_tracestate_are_kept_on_the_trace(conversation, alice,
                                                                       sent_turns):
    trace = sent(conversation, alice, traceparent=f" {TRACEPARENT} ", tracestate="congo=t61rcWkgMzE")

    assert trace.meta == {"traceparent": TRACEPARENT, "tracestate": "congo=t61rcWkgMzE"}


@pytest.mark.parametrize("traceparent", [
    "", "garbage", f"ff-{CALLER_TRACE}-00f067aa0ba902b7-01",
    f"00-{'0' * 32}-00f067aa0ba902b7-01", f"00-{CALLER_TRACE}-{'0' * 16}-01",
    f"00-{CALLER_TRACE}-00f067aa0ba902b7-01-extra", f"{TRACEPARENT},{TRACEPARENT}",
])
def test_an_invalid_traceparent_is_ignored_with_its_tracestate(conversation, alice, sent_turns,
                                                                traceparent):
    trace = sent(conversation, alice, traceparent=traceparent, tracestate="congo=t61rcWkgMzE")

    assert trace.status == Trace.Status.QUEUED
    assert trace.meta == {}


@pytest.mark.parametrize("tracestate", ["x" * 513, "vendor=caf\u00e9", "a=1\nb=2", "   "])
def test_a_tracestate_that_is_too_long_or_not_printable_is_dropped(tracestate):
    assert trace_context_meta(TRACEPARENT, tracestate) == {"traceparent": TRACEPARENT}


def test_traceparent_for_uses_the_callers_trace_id(conversation, alice, sent_turns):
    trace = sent(conversation, alice, traceparent=TRACEPARENT)
    # the team exports its turns, so the calls' context is sampled
    TraceExporter.objects.create(team=trace.team, endpoint="https://collector.example.com")
    export_config.forget()

    config = turn_setup_build(trace=trace).config

    expected = tool_traceparent(trace.uuid, parse_traceparent(TRACEPARENT), 2, "call_x",
                                sampled=True)
    assert config.traceparent_for(2, "call_x") == expected
    assert expected.startswith(f"00-{CALLER_TRACE}-") and expected.endswith("-01")
    assert config.traceparent_for(2, "call_y") != expected  # each call its own span
    assert config.tracestate == ""  # the caller sent none


def test_the_callers_tracestate_is_sent_on_with_the_calls(conversation, alice, sent_turns):
    trace = sent(conversation, alice, traceparent=TRACEPARENT, tracestate="congo=t61rcWkgMzE")

    assert turn_setup_build(trace=trace).config.tracestate == "congo=t61rcWkgMzE"


def test_without_one_traceparent_for_uses_the_traces_own_id(conversation, alice, sent_turns):
    trace = sent(conversation, alice)

    export_config.forget()
    config = turn_setup_build(trace=trace).config  # no exporter: not sampled

    expected = tool_traceparent(trace.uuid, None, 2, "call_x", sampled=False)
    assert config.traceparent_for(2, "call_x") == expected
    assert expected.startswith(f"00-{trace.uuid.hex}-") and expected.endswith("-00")
    assert turn_traceparent_for(trace, sampled=False)(2, "call_x") == expected
    assert config.tracestate == ""
