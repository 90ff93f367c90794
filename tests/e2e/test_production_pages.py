"""The pages as production serves them (``DEBUG=0``): finished turns, a finished trace's
timeline and the trace list's rows are kept rendered there (``agentsite.fragments``), which the
other browser tests, on a ``DEBUG`` stack, never see. A reload, a rating and a second reader go
through the kept copies in a real browser."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest

from tests.e2e.conftest import Session, sign_in


@pytest.fixture(scope="module")
def production(chromium) -> Iterator[Any]:
    from agentsite.stack import Stack

    running = Stack(worker_threads=4, debug=False).start()
    try:
        running.ids = running.seed({"agents": [{"name": "Helper", "tools": ["calculator"],
                                                  "provider_options": {"token_delay_s": 0.005}}]})
        yield running
    finally:
        running.stop()


@pytest.fixture(scope="module")
def signed_in(production, chromium) -> Iterator[Any]:
    contexts = []

    def make(username: str) -> Session:
        context, session = sign_in(chromium, production, username)
        contexts.append(context)
        return session

    yield make
    for context in contexts:
        context.close()


def test_kept_turns_timelines_and_rows_read_and_act_as_rendered_ones(signed_in):
    alice = signed_in("alice")
    chat_url = alice.open_chat_with("Helper")
    alice.send("What is 12 * 7?")
    alice.answers("completed").first.wait_for()
    alice.send("What is 6 * 7?")
    alice.answers("completed").nth(1).wait_for()

    # Rendered, then kept: two reloads show the same two answers, and their forms still act.
    for _ in range(2):
        alice.page.goto(chat_url)
        alice.wait_for_socket()
        answers = alice.answers("completed")
        assert answers.count() == 2
        assert "84" in answers.first.locator(".md").inner_text()
    alice.answers("completed").first.locator("button.thumb[value='up']").click()
    alice.page.locator("button.thumb[aria-pressed='true']").first.wait_for()
    alice.page.goto(chat_url)
    assert alice.answers("completed").first.locator("button.thumb[aria-pressed='true']").count() == 1
    assert alice.answers("completed").nth(1).locator("button.thumb[aria-pressed='true']").count() == 0

    # A third turn on the kept page, sent from the reloaded (kept) composer's branch.
    alice.send("What is 2 + 2?")
    alice.answers("completed").nth(2).wait_for()
    assert "4" in alice.answers("completed").nth(2).locator(".md").inner_text()

    # The inspector's kept timeline and the list's kept rows, twice each.
    alice.answers("completed").first.locator("a.trace-link").click()
    alice.page.wait_for_url(re.compile(r"/traces/[0-9a-f-]+/$"))
    trace_url = alice.page.url
    steps = alice.page.locator("#steps li.step").count()
    assert steps >= 3
    alice.page.goto(trace_url)
    assert alice.page.locator("#steps li.step").count() == steps
    alice.page.locator("#steps li.step").first.locator("summary").click()
    alice.page.locator("#steps li.step .step-body dl").first.wait_for()  # a kept row still opens
    for _ in range(2):
        alice.page.goto(alice.stack.url + "/traces/")
        assert alice.page.locator("table.list tbody tr").count() == 3
    assert not alice.watch.errors

    # Bob, in the same team, cannot read alice's private conversation, kept or not.
    bob = signed_in("bob")
    response = bob.page.goto(chat_url)
    assert response is not None and response.status == 404


def test_the_kept_sidebar_marks_the_open_conversation_and_follows_a_new_title(production, chromium):
    """The conversation list beside a chat is kept rendered too (under what it shows): going
    from one conversation to the other moves the mark, a new conversation's title appears in
    it, and on a phone the drawer opens on the same kept list."""
    context, alice = sign_in(chromium, production, "alice", viewport={"width": 390, "height": 844})
    try:
        first = alice.open_chat_with("Helper")
        alice.send("Plan the first picnic")
        alice.answers("completed").first.wait_for()
        second = alice.open_chat_with("Helper")
        alice.send("Plan the second picnic")
        alice.answers("completed").first.wait_for()
        for url, other in ((first, second), (second, first), (first, second)):
            alice.page.goto(url)
            current = alice.page.locator("#sidebar-list a[aria-current='page']")
            assert current.count() == 1 and current.get_attribute("href") == url.removeprefix(production.url)
            assert alice.page.locator(f"#sidebar-list a[href='{other.removeprefix(production.url)}']").count() == 1
        links = alice.page.locator("#sidebar-list a").all_text_contents()  # hidden on a phone until opened
        assert any("first picnic" in text.lower() for text in links), links
        assert any("second picnic" in text.lower() for text in links), links
        alice.page.locator("button.sidebar-open").click()
        alice.page.locator("#chat-sidebar a[aria-current='page']").wait_for(state="visible")
        assert not alice.watch.errors
    finally:
        context.close()

