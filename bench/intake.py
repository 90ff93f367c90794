"""The chat's intake: messages people send while the worker is busy answering earlier ones.

    python -m bench.intake [--check] [--database sqlite|postgres] [--messages 400]
                           [--senders 20] [--latency 3] [--profile DIR]

Starts the whole stack (``agentsite.stack.Stack``: embedded Redis, one daphne, one Celery worker
with the thread pool, beat) with production settings (``DEBUG=0``; the client says it came
through an HTTPS proxy, ``X-Forwarded-Proto: https``, as production runs behind one), on SQLite,
or with ``--database postgres`` on a throwaway database whose role may hold 30 connections
(``bench._postgres.postgres_database``, dropped afterwards). alice signs in; her demo agent's model
takes ``--latency`` seconds per request, so the worker stays busy with the turns the messages
start (50 threads, each writing its turn's steps) while more messages keep coming.

``--senders`` clients each send their next message as soon as the last one was answered, as the
chat's form sends it (``POST /chat/<id>/send/`` with htmx's headers: the message stored, its turn
queued behind the conversation's earlier ones or sent to the worker, the pending answer
rendered), round-robin over 40 conversations, until ``--messages`` were sent. Measured: messages
accepted per second over the run's wall time, p50 and p99 of a send's answer, refused sends
(any answer but 200, with their reasons), and the CPU milliseconds per message of the web
process (the worker's beside it, for its busy turns).

Targets (issue 29): >= 50 messages/s on SQLite and >= 200/s on PostgreSQL, none refused.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field

import httpx

from agentsite.stack import PASSWORD, Stack
from bench import _measure, _profile
from bench._postgres import PG_ADMIN_URL, postgres_database

TARGETS = {"sqlite": 50.0, "postgres": 200.0}
CONVERSATIONS = 40
TIMEOUT_S = 120.0


@dataclass
class Sent:
    times: list[float] = field(default_factory=list)
    refused: Counter[str] = field(default_factory=Counter)


class Session:
    """alice signed in, with the headers a browser behind the site's HTTPS proxy sends."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.headers = {"X-Forwarded-Proto": "https", "Origin": url.replace("http://", "https://"),
                        "Referer": url.replace("http://", "https://") + "/"}

    async def sign_in(self, client: httpx.AsyncClient) -> None:
        page = await client.get("/accounts/login/", headers=self.headers)
        csrf = page.cookies.get("csrftoken") or ""
        answer = await client.post("/accounts/login/", data={
            "username": "alice", "password": PASSWORD, "csrfmiddlewaretoken": csrf},
            headers={**self.headers, "Cookie": f"csrftoken={csrf}"})
        session = answer.cookies.get("sessionid")
        if not session:
            raise SystemExit(f"could not sign in as alice (HTTP {answer.status_code})")
        csrf = answer.cookies.get("csrftoken") or csrf
        # Secure cookies over the loopback's plain HTTP: sent by hand, as the proxy would pass them.
        self.headers.update({"Cookie": f"sessionid={session}; csrftoken={csrf}", "X-CSRFToken": csrf})

    async def conversations(self, client: httpx.AsyncClient, agent: str, count: int) -> list[str]:
        made = []
        for _ in range(count):
            answer = await client.post("/chat/new/", data={"agent": agent}, headers=self.headers)
            location = answer.headers.get("location", "")
            if answer.status_code != 302 or "/chat/" not in location:
                raise SystemExit(f"could not start a conversation (HTTP {answer.status_code})")
            made.append(location.rstrip("/").rsplit("/", 1)[1])
        return made


async def send_all(session: Session, conversations: list[str], *, messages: int, senders: int) -> tuple[Sent, float]:
    sent = Sent()
    numbers = iter(range(messages))
    limits = httpx.Limits(max_connections=senders, max_keepalive_connections=senders)
    async with httpx.AsyncClient(base_url=session.url, timeout=TIMEOUT_S, limits=limits) as client:
        async def sender() -> None:
            for number in numbers:
                conversation = conversations[number % len(conversations)]
                started = time.perf_counter()
                try:
                    answer = await client.post(
                        f"/chat/{conversation}/send/",
                        data={"text": f"Message {number}: hello", "client_id": uuid.uuid4().hex},
                        headers={**session.headers, "HX-Request": "true"})
                except httpx.HTTPError as exc:
                    sent.refused[f"{type(exc).__name__}: {exc}"[:160]] += 1
                    continue
                if answer.status_code == 200:
                    sent.times.append(time.perf_counter() - started)
                else:
                    sent.refused[_measure.error_reason(answer.status_code, answer.text)] += 1

        started = time.perf_counter()
        await asyncio.gather(*(sender() for _ in range(senders)))
    return sent, time.perf_counter() - started


def run(args: argparse.Namespace, database_url: str | None) -> tuple[Sent, float, dict[str, float]]:
    with Stack(worker_threads=50, debug=False, database_url=database_url) as stack:
        ids = stack.seed({"agents": [{"name": "Intake", "tools": [],
                                      "provider_options": {"request_latency_s": args.latency}}]})
        session = Session(stack.url)

        async def prepare() -> list[str]:
            async with httpx.AsyncClient(base_url=stack.url, timeout=TIMEOUT_S) as client:
                await session.sign_in(client)
                return await session.conversations(client, ids["agents"]["Intake"], CONVERSATIONS)

        conversations = asyncio.run(prepare())
        pids = {"web": stack.pid("web"), "worker": stack.pid("worker")}
        with _profile.profiled("intake", pids, args.profile):
            meter = _measure.CpuMeter(pids).start()
            sent, wall = asyncio.run(send_all(session, conversations, messages=args.messages,
                                              senders=args.senders))
            cpu = meter.stop()
    return sent, wall, cpu


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true")
    parser.add_argument("--database", choices=("sqlite", "postgres"), default="sqlite")
    parser.add_argument("--messages", type=int, default=400)
    parser.add_argument("--senders", type=int, default=20)
    parser.add_argument("--latency", type=float, default=3.0, help="seconds per model request")
    _profile.add_profile_argument(parser)
    args = parser.parse_args(argv)
    load_line = _measure.print_machine()
    with contextlib.ExitStack() as cleanup:
        database_url = None
        if args.database == "postgres":
            database_url, _ = cleanup.enter_context(postgres_database(PG_ADMIN_URL, 30))
        sent, wall, cpu = run(args, database_url)
    accepted = len(sent.times)
    refused = sum(sent.refused.values())
    rate = accepted / wall if wall else 0.0
    times = [t * 1000 for t in sent.times]
    target = TARGETS[args.database]
    print(f"intake ({args.database}, {args.senders} senders, model at {args.latency:g} s per request, "
          f"the worker busy): {accepted} of {args.messages} messages accepted in {wall:.1f} s = "
          f"{rate:.1f}/s; send's answer p50 {_measure.percentile(times, 0.5):.0f} ms, "
          f"p99 {_measure.percentile(times, 0.99):.0f} ms; refused {refused}")
    for reason, count in sent.refused.most_common(3):
        print(f"  refused {count} x {reason}")
    per_message = {name: seconds / max(args.messages, 1) * 1000 for name, seconds in cpu.items()}
    print("CPU ms per message: " + ", ".join(f"{name} {value:.1f}" for name, value in per_message.items())
          + f" (the worker's is its busy turns'); {load_line}")
    _measure.record("intake", {f"web CPU ms/message, {args.database}": per_message.get("web", 0.0)})
    ok = rate >= target and refused == 0
    print(f"verdict: {'PASS' if ok else 'FAIL'} (target: >= {target:g} messages/s on {args.database}, "
          f"none refused; measured {rate:.1f}/s, {refused} refused)")
    return 1 if args.check and not ok else 0


if __name__ == "__main__":
    sys.exit(main())
