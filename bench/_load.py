"""The gateway benchmark's load client, the same code for every target it drives (agentsite's
``/v1/chat/completions`` and LiteLLM's): one ``httpx.AsyncClient`` per run with a pool of
``concurrent`` connections, ``concurrent`` senders each sending its next request as soon as the
last one ended, whole or streamed, each answer checked (text, ``[DONE]``, no ``error`` event),
timed, and the servers' CPU read from ``/proc`` around the run.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from dataclasses import dataclass
from typing import Any

import httpx

from bench import _measure

QUESTION = "Hello! How are you today?"
IDLE_CPU = 0.05  # servers are idle below this share of one CPU
IDLE_WAIT_S = 60.0


@dataclass
class Target:
    name: str
    url: str
    key: str
    model: str
    pids: dict[str, int | None]  # the processes whose CPU is its cost
    shown: tuple[str, ...]  # those of ``pids`` in the table (the rest in the details)
    tree: tuple[str, ...] = ()  # ``pids`` whose descendants count too


@dataclass
class Sample:
    latency: float | None = None  # seconds to the whole answer
    first_text: float | None = None
    error: str = ""


@dataclass
class Run:
    target: str
    mode: str
    concurrent: int
    samples: list[Sample]
    wall_s: float
    cpu: dict[str, float]  # seconds per process name, and "client"
    shown: tuple[str, ...] = ()

    @property
    def ok(self) -> list[Sample]:
        return [s for s in self.samples if not s.error]

    @property
    def errors(self) -> list[Sample]:
        return [s for s in self.samples if s.error]

    @property
    def rps(self) -> float:
        return len(self.ok) / self.wall_s if self.wall_s > 0 else float("nan")

    def latency_ms(self, q: float) -> float:
        return _measure.percentile([s.latency * 1000 for s in self.ok if s.latency is not None], q)

    def first_text_ms(self, q: float) -> float:
        return _measure.percentile([s.first_text * 1000 for s in self.ok if s.first_text is not None], q)

    def cpu_ms(self, name: str) -> float:
        return self.cpu.get(name, 0.0) / len(self.samples) * 1000 if self.samples else float("nan")

    def server_cpu_ms(self) -> float:
        return sum(self.cpu_ms(name) for name in self.shown)


# -- one request ---------------------------------------------------------------------------------
async def request(client: httpx.AsyncClient, target: Target, streamed: bool) -> Sample:
    sample = Sample()
    body: dict[str, Any] = {"model": target.model, "messages": [{"role": "user", "content": QUESTION}]}
    if streamed:
        body["stream"] = True
    started = time.perf_counter()
    try:
        if not streamed:
            answer = await client.post("/v1/chat/completions", json=body)
            sample.latency = time.perf_counter() - started
            if answer.status_code != 200:
                sample.error = _measure.error_reason(answer.status_code, answer.text)
            elif not text_of(answer):
                sample.error = f"an answer without text: {answer.text[:120]}"
            return sample
        async with client.stream("POST", "/v1/chat/completions", json=body) as answer:
            if answer.status_code != 200:
                text = (await answer.aread()).decode(errors="replace")
                sample.error = _measure.error_reason(answer.status_code, text)
                return sample
            done = await _read_stream(answer, sample, started)
        sample.latency = time.perf_counter() - started
        if not sample.error and not done:
            sample.error = "the stream ended without [DONE]"
        elif not sample.error and sample.first_text is None:
            sample.error = "a stream without text"
    except httpx.HTTPError as exc:
        cause = str(exc) or repr(exc.__context__ or "")
        when = "mid-stream" if sample.first_text is not None else "before the answer"
        sample.error = f"{type(exc).__name__} {when}: {cause}".rstrip(": ")
    return sample


def text_of(answer: httpx.Response) -> str:
    try:
        return answer.json()["choices"][0]["message"]["content"] or ""
    except (ValueError, KeyError, IndexError, TypeError):
        return ""


async def _read_stream(answer: httpx.Response, sample: Sample, started: float) -> bool:
    """Read server-sent events; True when ``[DONE]`` came."""
    buffer = b""
    done = False
    async for raw in answer.aiter_raw():
        buffer += raw.replace(b"\r\n", b"\n")
        while b"\n\n" in buffer:
            event, buffer = buffer.split(b"\n\n", 1)
            lines = [line for line in event.split(b"\n") if line.startswith(b"data:")]
            if not lines:
                continue  # a comment keeps a quiet stream open
            data = b"\n".join(line.removeprefix(b"data:").strip() for line in lines)
            if data == b"[DONE]":
                done = True
                continue
            try:
                chunk = json.loads(data)
            except ValueError:
                sample.error = sample.error or f"an event that is not JSON: {event[:80]!r}"
                continue
            if "error" in chunk:
                error = chunk["error"]
                sample.error = sample.error or f"error event: {error.get('message', error) if isinstance(error, dict) else error}"
                continue
            delta = (chunk.get("choices") or [{}])[0].get("delta") or {}
            if delta.get("content") and sample.first_text is None:
                sample.first_text = time.perf_counter() - started
    return done


# -- one run -------------------------------------------------------------------------------------
def client_for(target: Target, concurrent: int, timeout_s: float) -> httpx.AsyncClient:
    return httpx.AsyncClient(
        base_url=target.url, headers={"Authorization": f"Bearer {target.key}"},
        timeout=httpx.Timeout(timeout_s, connect=30.0),
        limits=httpx.Limits(max_connections=concurrent, max_keepalive_connections=concurrent))


async def load(target: Target, mode: str, concurrent: int, requests: int, timeout_s: float) -> Run:
    """``requests`` requests, ``concurrent`` in flight at any time, timed with the servers' CPU."""
    streamed = mode == "streamed"
    samples: list[Sample] = []
    meter = _measure.CpuMeter({**target.pids, "client": os.getpid()}, tree=target.tree)
    async with client_for(target, concurrent, timeout_s) as client:
        remaining = iter(range(requests))

        async def sender() -> None:
            for _ in remaining:
                samples.append(await request(client, target, streamed))

        meter.start()
        started = time.perf_counter()
        await asyncio.gather(*(sender() for _ in range(min(concurrent, requests))))
        wall = time.perf_counter() - started
        cpu = meter.stop()
    return Run(target.name, mode, concurrent, samples, wall, cpu, target.shown)


def wait_idle(targets: list[Target]) -> float:
    """Wait until the servers' processes use less than IDLE_CPU of a CPU (turns left over by a
    run, a reaper pass); the seconds waited."""
    meter = _measure.CpuMeter({f"{t.name}:{n}": p for t in targets for n, p in t.pids.items()},
                              tree=tuple(f"{t.name}:{n}" for t in targets for n in t.tree))
    started = time.monotonic()
    while time.monotonic() - started < IDLE_WAIT_S:
        meter.start()
        time.sleep(0.5)
        if sum(meter.stop().values()) < IDLE_CPU * 0.5:
            break
    return time.monotonic() - started
