"""Comparing two runs in a real browser: from the inspector's "Compare with…" form to the
first divergence, explained and one click away."""

from __future__ import annotations

import re


def run_and_open_trace(s, question: str) -> str:
    """Asks Helper ``question`` in a new chat; the address of the turn's trace."""
    s.open_chat_with("Helper")
    s.send(question)
    answer = s.answers("completed").first
    answer.wait_for()
    return s.stack.url + answer.locator("a.trace-link").get_attribute("href")


def test_two_turns_compared_show_their_first_divergence(login):
    s = login("alice")
    first = run_and_open_trace(s, "What time is it in Tokyo?")
    second = run_and_open_trace(s, "What time is it in Berlin?")

    s.page.goto(first)
    s.wait_for_socket()  # the header may be refreshed once as the page re-syncs
    s.page.fill("form.compare-with input[name=b]", second)  # an inspector address will do
    s.page.click("form.compare-with button:has-text('Compare with')")
    s.page.wait_for_url(re.compile(r"/traces/compare/\?a=.+&b=.+"))

    summary = s.page.locator("[data-testid=divergence]").inner_text()
    assert summary.startswith("Step 1: model request demo — the request differs: message 1 (user)"), summary
    assert "Tokyo" in summary and "Berlin" in summary
    s.page.click("#first-divergence a:has-text('Jump to it')")
    s.page.wait_for_url(re.compile(r"#pair-1$"))
    assert s.page.locator("#pair-1.differs").is_visible()
    # the answers' diff strikes run A's city and marks run B's
    diff = s.page.locator("[data-testid=answer-diff]")
    assert "Tokyo" in " ".join(diff.locator("del").all_inner_texts())
    assert "Berlin" in " ".join(diff.locator("ins").all_inner_texts())
    assert s.page.locator(".compare-totals tr:has-text('Tool calls') td").first.inner_text() == "1"
    assert not s.watch.errors and not s.watch.dialogs
