"""The cancellation audit in a real browser: a story stopped mid-stream from the chat, then the
trace's "What the stop cut" panel read in the inspector."""

from __future__ import annotations

import re

from tests.helpers import wait_for


def test_a_story_stopped_mid_stream_shows_what_the_stop_cut_in_the_inspector(login):
    s = login("alice")
    s.open_chat_with("Slow")
    s.send("Tell me a story")
    seen = wait_for(lambda: s.streamed() if len(s.streamed()) > 20 else "", what="a few streamed words")
    s.page.locator("li.answer.pending button:has-text('Stop')").click()
    stopped = s.answers("cancelled").first
    stopped.wait_for(timeout=10_000)

    stopped.locator("a.trace-link").click()
    s.page.wait_for_url(re.compile(r"/traces/[0-9a-f-]+/$"))
    panel = s.page.locator("#stop-audit")
    panel.wait_for()
    text = panel.inner_text()

    assert "What the stop cut" in text and "Cancelled" in text
    assert "Stopped by" in text and "alice" in panel.locator(".audit-by").inner_text()
    assert re.search(r"after the stop was asked for", text)
    # the model request in flight: what it had streamed (at least what the chat showed, as
    # markdown, when Stop was pressed), with its tokens estimated
    streamed = panel.locator(".audit-text").inner_text()
    assert " ".join(seen.split()[:3]) in streamed and len(streamed.strip()) >= 20, (streamed, seen)
    tokens = panel.locator(".audit-tokens").inner_text()
    assert tokens.startswith("≈") and "estimated" in tokens
    assert "Nothing ran after the stop." in text
    # its link leads to the step on the timeline
    step = panel.locator(".audit-request a").first.get_attribute("href")
    assert re.fullmatch(r"#step-\d+", step) and s.page.locator(step).count() == 1
    assert not s.watch.errors
