"""The OpenTelemetry identity of a turn and its steps, derived from what is stored.

A turn's spans are named by the trace, never by a counter in memory: the trace id is the
caller's (an incoming W3C ``traceparent``, kept in ``Trace.meta``) or the trace's own uuid,
and a span id is a hash of the trace's uuid and the step's *key* (``tool:<iteration>:<call
id>``, the recorder's address of a step; ``turn`` for the turn itself). So a step exported
live, by a backfill, or by another worker that resumed the turn, carries the same ids, and
the ``traceparent`` a tool call sends out (``tool_traceparent``) names the span that the
call's step becomes.
"""

from __future__ import annotations

import hashlib
import re
import uuid
from dataclasses import dataclass

ROOT_KEY = "turn"
# version 00: 2 hex, trace id 32, parent id 16, flags 2 (https://www.w3.org/TR/trace-context/)
TRACEPARENT = re.compile(r"^([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-.*)?$")
SAMPLED = 0x01


@dataclass(frozen=True, slots=True)
class Parent:
    """A caller's span: the turn's span becomes its child."""

    trace_id: int
    span_id: int
    sampled: bool = True

    @property
    def traceparent(self) -> str:
        return format_traceparent(self.trace_id, self.span_id, sampled=self.sampled)


def parse_traceparent(value: str | None) -> Parent | None:
    """The parent named by a W3C ``traceparent`` header, or None when it is absent or invalid
    (version ``ff``, all-zero ids, wrong lengths: the spec says to ignore such a header)."""
    if not value or len(value) > 512:
        return None
    match = TRACEPARENT.match(value.strip().lower())
    if match is None:
        return None
    version, trace_hex, span_hex, flags_hex, rest = match.groups()
    if version == "ff" or (version == "00" and rest):
        return None
    trace_id, span_id = int(trace_hex, 16), int(span_hex, 16)
    if not trace_id or not span_id:
        return None
    return Parent(trace_id=trace_id, span_id=span_id, sampled=bool(int(flags_hex, 16) & SAMPLED))


def format_traceparent(trace_id: int, span_id: int, *, sampled: bool = True) -> str:
    return f"00-{trace_id:032x}-{span_id:016x}-{'01' if sampled else '00'}"


def trace_id_for(trace_uuid: uuid.UUID, parent: Parent | None = None) -> int:
    """The OpenTelemetry trace id of a turn: its caller's, else the trace's own uuid."""
    return parent.trace_id if parent is not None else trace_uuid.int


def span_id_for(trace_uuid: uuid.UUID, key: str) -> int:
    """A stable, non-zero 64-bit span id for the step ``key`` of a trace."""
    digest = hashlib.blake2b(f"{trace_uuid.hex}/{key}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") or 1


def tool_step_key(iteration: int, call_id: str) -> str:
    """The recorder's key of a tool call's step (``traces.record.recorder``)."""
    return f"tool:{iteration}:{call_id}"


def tool_traceparent(trace_uuid: uuid.UUID, parent: Parent | None, iteration: int, call_id: str,
                     *, sampled: bool) -> str:
    """The ``traceparent`` an outgoing tool call carries: the span its step is exported as."""
    return format_traceparent(trace_id_for(trace_uuid, parent),
                              span_id_for(trace_uuid, tool_step_key(iteration, call_id)),
                              sampled=sampled)
