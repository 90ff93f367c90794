"""stdio servers kept by the process across turns (``host``): each turn is its own event loop
(``asyncio.run`` here, as a turn's thread runs one), and a turn's end (``close_connections``)
leaves the process's stdio servers running for the next turns; one process per server and
team, restarted when it died, at most ``max_processes`` of a server and ``max_calls`` calls in
flight on one; ``host_stop`` (the worker's shutdown) ends them all. The server is a real one
written with the SDK (``gate_server.py``), started by the SDK's stdio client."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import psutil
import pytest

from agents.tools.mcp import host, mcp_servers_stop
from agents.tools.mcp.client import call_tool
from agents.tools.mcp.pool import close_connections
from agents.tools.mcp.types import Endpoint, StdioLimits

pytestmark = pytest.mark.slow

GATE = str(Path(__file__).with_name("gate_server.py"))


def gate(team_id: int = 1, **limits: float) -> Endpoint:
    return Endpoint(name="gate", transport="stdio", command=sys.executable, args=(GATE,),
                    team_id=team_id, limits=StdioLimits(**limits))  # type: ignore[arg-type]


def gate_processes() -> list[psutil.Process]:
    return [p for p in psutil.Process().children(recursive=True)
            if any(part.endswith("gate_server.py") for part in p.cmdline())]


@pytest.fixture(autouse=True)
def stopped_after():
    yield
    host.host_stop()


async def _call(endpoint: Endpoint, tool: str, **arguments: float) -> str:
    result = await call_tool(endpoint, tool, dict(arguments), timeout_s=20, max_bytes=1000)
    assert result.is_error is False, result.text
    return result.text


def turn(endpoint: Endpoint, tool: str = "pid", **arguments: float) -> str:
    """One call as a turn makes it: in an event loop of its own, whose connections close at
    its end."""
    async def run() -> str:
        try:
            return await _call(endpoint, tool, **arguments)
        finally:
            await close_connections()

    return asyncio.run(run())


def test_turns_share_the_process_they_started_and_the_shutdown_stops_it() -> None:
    first = turn(gate())
    assert [p.pid for p in gate_processes()] == [int(first)]  # the turn ended; it runs on
    assert turn(gate()) == first and turn(gate()) == first
    mcp_servers_stop()  # the worker's shutdown
    assert gate_processes() == []
    assert turn(gate()) != first  # a new host starts it again


def test_each_team_has_its_own_process() -> None:
    mine, theirs = turn(gate(team_id=1)), turn(gate(team_id=2))
    assert mine != theirs
    assert turn(gate(team_id=1)) == mine and turn(gate(team_id=2)) == theirs
    assert sorted(p.pid for p in gate_processes()) == sorted([int(mine), int(theirs)])


def test_a_server_that_died_while_idle_is_started_again_for_the_next_call(monkeypatch) -> None:
    monkeypatch.setattr(host, "HEALTH_AFTER_S", 0.0)  # every call after another checks first
    first = turn(gate())
    process = psutil.Process(int(first))
    process.kill()
    process.wait(10)
    second = turn(gate())  # the ping found it gone: a new process, and the call succeeded
    assert second != first
    assert [p.pid for p in gate_processes()] == [int(second)]


def test_at_most_max_processes_of_a_server_the_least_recently_used_idle_one_stops() -> None:
    one, two = turn(gate(team_id=1, max_processes=2)), turn(gate(team_id=2, max_processes=2))
    turn(gate(team_id=1, max_processes=2))  # team 2's is now the least recently used
    three = turn(gate(team_id=3, max_processes=2))
    assert sorted(p.pid for p in gate_processes()) == sorted([int(one), int(three)])
    assert int(two) not in [p.pid for p in gate_processes()]


def test_calls_beyond_max_calls_wait_their_turn() -> None:
    async def burst(endpoint: Endpoint) -> list[str]:
        try:
            return await asyncio.gather(*(_call(endpoint, "hold", seconds=0.3) for _ in range(4)))
        finally:
            await close_connections()

    # Four calls at once, one at a time on the server: none saw another in flight.
    assert asyncio.run(burst(gate(max_calls=1))) == ["1"] * 4
    host.host_stop()
    # The same four with room for them: the server had them in flight together.
    assert max(int(most) for most in asyncio.run(burst(gate(max_calls=4)))) > 1


def test_a_cancelled_call_leaves_the_kept_server_usable() -> None:
    first = turn(gate())

    async def cancelled() -> None:
        call = asyncio.ensure_future(_call(gate(), "hold", seconds=30))
        await asyncio.sleep(0.5)
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call

    asyncio.run(cancelled())
    assert turn(gate()) == first
